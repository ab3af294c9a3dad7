"""The SGLang bridge's parts that need no SGLang: the version gate and its one-line
errors, the recorder's op mapping (a mapped trace replays on our cache), the canonical
state comparison, the launcher's usage checks, and the scenario features the
recorder relies on (named inserts, JSONL comments)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import pytest

from urc_util import JSONL_HEADER, jsonl, toml, urc
from workbench.bridge import sglang_env
from workbench.bridge.canonical import CanonicalState, NodeState, first_difference
from workbench.bridge.sglang_env import BridgeError, check_version
from workbench.model.timeline.runner import run_scenario
from workbench.model.scenarios.scenario import ScenarioError, load_scenario, scenario_from_records
from workbench.record.hook import next_free
from workbench.model import ops
from workbench.model.ops import evict as evict_ops, keys, locks
from workbench.record.mapping import RecordedCall, TraceMapper, state_expect
from workbench.model.ops.request_view import req_view

ROOT = Path(__file__).resolve().parents[2]
SMOKE = str(ROOT / "scenarios" / "smoke.toml")


# ---- the version gate ---------------------------------------------------------------------
def _installed(monkeypatch, version):
    def fake(name):
        if version is None:
            raise metadata.PackageNotFoundError(name)
        return version

    monkeypatch.setattr(sglang_env.metadata, "version", fake)


def test_missing_sglang_is_one_line_exit_2(capsys, monkeypatch):
    _installed(monkeypatch, None)
    for argv in (("run", "--against", "sglang", SMOKE), ("bench", "--against", "sglang", "--trace", SMOKE)):
        rc, out, err = urc(capsys, *argv)
        assert rc == 2 and out == ""
        assert err.strip() == f"urc {argv[0]}: needs SGLang 0.5.23: {sglang_env.INSTALL}"


def test_another_sglang_version_is_refused_with_both_named(monkeypatch):
    _installed(monkeypatch, "0.6.1")
    with pytest.raises(BridgeError, match=r"found SGLang 0\.6\.1, but the bridge follows SGLang 0\.5\.23.*--allow-version"):
        check_version()
    warned = []
    assert check_version(allow_version=True, warn=warned.append) == "0.6.1"
    assert len(warned) == 1 and "0.6.1" in warned[0] and "0.5.23" in warned[0]


@pytest.mark.parametrize("argv, says", [
    (("run", "--sglang-core", "rust", SMOKE), "--sglang-core only applies with --against sglang"),
    (("run", "--allow-version", SMOKE), "--allow-version only applies with --against sglang"),
    (("run", "--compare-every", "5", SMOKE), "--compare-every only applies with --against sglang"),
    (("run", "--against", "sglang", "--record", "x.jsonl", SMOKE), "--against does not go with --record"),
    (("run", "--against", "sglang", "--until", "violation", SMOKE), "--against does not go with --until"),
    (("bench", "--against", "sglang", "--fuzz"), "--against does not go with --fuzz"),
    (("tui", "--against", "sglang", "--follow", "t.jsonl"), "--against does not go with --follow"),
])
def test_bridge_options_misused(capsys, tmp_path, monkeypatch, argv, says):
    monkeypatch.chdir(tmp_path)
    rc, out, err = urc(capsys, *argv)
    assert rc == 2 and out == "" and "Traceback" not in err
    assert err.strip().endswith(says), err
    assert not Path("x.jsonl").exists()


# ---- the recorder's mapping ------------------------------------------------------------------
def test_every_match_and_insert_is_named_and_a_lock_names_the_latest_on_its_node():
    m = TraceMapper(["full"])
    assert keys.record_insert(m, [1, 2, 3], None, 0, node=7, prefix_len=0, page_size=1) == {
        "op": "insert", "key": [1, 2, 3], "as": "i1", "expect": {"prefix_len": 0}}
    assert keys.record_match(m, [1, 2, 3], None, node=7, prefix_len=3)["as"] == "m2"
    assert locks.record_lock(m, 7, receipt="r")["match"] == "m2"  # the latest name ending on node 7
    assert locks.record_lock(m, 99, receipt="r") == "inc_lock_ref(node 99): no recorded match or insert ended on that node"
    assert locks.record_lock(m, 0, receipt="r", is_root=True).startswith("inc_lock_ref on the root")
    assert "skipping swa" in locks.record_lock(m, 7, receipt="r", skipped=("swa",))


def test_an_unlock_finds_its_own_lock_by_receipt_and_a_window_release_keeps_it_open():
    m = TraceMapper(["full", "swa"])
    keys.record_match(m, [1, 2], None, node=5, prefix_len=2)
    first = locks.record_lock(m, 5, receipt="uuid-a")["as"]
    second = locks.record_lock(m, 5, receipt="uuid-b")["as"]
    assert locks.record_release_window(m, 5, "uuid-a") == {"op": "release_window", "lock": first}
    assert "already released: SGLang does nothing" in locks.record_release_window(m, 5, "uuid-a", already=True)
    assert locks.record_unlock(m, 5, "uuid-a") == {"op": "unlock", "lock": first}  # not the latest: the one with this receipt
    # a receipt the trace never saw (a lock taken before recording) must not release another lock
    assert "a lock the trace does not hold" in locks.record_unlock(m, 5, "uuid-zzz")
    assert locks.record_unlock(m, 5, "uuid-b") == {"op": "unlock", "lock": second}
    assert "a lock the trace does not hold" in locks.record_unlock(m, 5, "uuid-b")


def test_evictions_and_inserts_the_format_cannot_express():
    m = TraceMapper(["full", "swa"])
    assert evict_ops.record_evict(m, {"full": 4, "swa": 0, "mamba": 0}, {"full": 6, "swa": 6, "mamba": 0}, for_alloc=False) == {
        "op": "evict", "full": 4, "expect": {"full_evicted": 6, "swa_evicted": 6}}
    step = evict_ops.record_evict(m, {"full": 4, "swa": 2, "mamba": 0}, {"full": 6, "swa": 9, "mamba": 0}, for_alloc=True)
    assert (step["full"], step["swa"]) == (6, 9) and step["description"].startswith("evict_for_alloc(full=4, swa=2)")
    assert "not a multiple of page_size 4" in keys.record_insert(m, [1] * 8, None, 6, node=1, prefix_len=0, page_size=4)
    assert state_expect({"full": (5, 3)}) == {"full_evictable": 5, "full_protected": 3}


def test_a_mapped_trace_with_comments_replays_on_our_cache(tmp_path):
    """What the recorder writes for a short session loads (comments skipped) and every
    recorded result holds on our cache."""
    m = TraceMapper(["full"])
    lines = [keys.record_insert(m, [1, 2, 3, 4], None, 0, node=11, prefix_len=0, page_size=1),
             "checkpoint(req r1, up_to=4): its tree calls follow",
             keys.record_match(m, [1, 2, 3, 4, 9], None, node=11, prefix_len=4),
             locks.record_lock(m, 11, receipt="a"),
             evict_ops.record_evict(m, {"full": 8, "swa": 0, "mamba": 0}, {"full": 0, "swa": 0, "mamba": 0}, for_alloc=False),
             locks.record_unlock(m, 11, "a"),
             evict_ops.record_evict(m, {"full": 0, "swa": 0, "mamba": 0}, {"full": 4, "swa": 0, "mamba": 0}, for_alloc=True)]
    lines[3]["expect"] = state_expect({"full": (0, 4)})
    path = tmp_path / "rec.jsonl"
    text = [json.dumps(JSONL_HEADER)] + [("# " + x) if isinstance(x, str) else json.dumps(x) for x in lines]
    path.write_text("\n".join(text) + "\n")
    scenario = load_scenario(path)
    assert [s.op for s in scenario.steps] == ["insert", "match", "lock", "evict", "unlock", "evict"]
    assert [s.line for s in scenario.steps] == [2, 4, 5, 6, 7, 8]  # file lines, comments counted
    timeline = run_scenario(scenario)
    assert timeline.passed, [r.failures for r in timeline.records]


def _live_req(rid, prompt, committed=None):
    """A stand-in for SGLang's Req: only what the recorder reads."""
    return SimpleNamespace(rid=rid, origin_input_ids=list(prompt), output_ids=[], lock=None, extend_end=None,
                           finished_len=None, cache_salt=None,
                           kv=SimpleNamespace(kv_committed_len=len(prompt) if committed is None else committed))


def _admitted(m, req, node, prefix_len):
    """The scheduler's admission as the cache sees it: the match with the request, a
    pin while it decides (no extend_end yet: a plain lock), then ``req.lock``."""
    lines = [keys.record_match(m, list(req.origin_input_ids), None, node=node, prefix_len=prefix_len)]
    m.requests.matched(req, node, list(req.origin_input_ids), None, prefix_len, 0)
    assert m.requests.admission(node) is None  # the pin
    lines.append(locks.record_lock(m, node, receipt=f"pin-{req.rid}"))
    req.extend_end = len(req.origin_input_ids)
    pending = m.requests.admission(node)
    assert pending is not None and m.requests.admit(pending) is None
    lines.append(ops.get("req_prefill").record(m, RecordedCall("inc_lock_ref", (node,), {}, None, pending)))
    req.lock = "held"
    lines.append(locks.record_unlock(m, node, f"pin-{req.rid}"))
    return lines


def test_a_live_request_is_written_as_request_ops_and_replays(tmp_path):
    m = TraceMapper(["full"])
    a, b = _live_req("rid-a", [1, 2, 3, 4]), _live_req("rid-b", [1, 2, 7])
    lines = [keys.record_insert(m, [1, 2, 3], None, 0, node=11, prefix_len=0, page_size=1)]
    lines += _admitted(m, a, 11, 3)
    assert lines[-2] == {"op": "req_prefill", "req": "r1", "tokens": [1, 2, 3, 4], "expect": {"prefix_len": 3}}
    a.output_ids, a.kv.kv_committed_len = [5, 6, 9], 6  # two decode steps; 9 is sampled, its KV not yet computed
    decoded = ops.get("req_decode").record(m, RecordedCall("req_decode", (), {}, None, req_view(a)))
    assert decoded == {"op": "req_decode", "req": "r1", "tokens": [5, 6]}
    checkpoint = ops.get("checkpoint")
    lines += [decoded, checkpoint.record(m, RecordedCall("checkpoint", (a,), {"up_to": 6}, None, req_view(a)))]
    assert lines[-1] == {"op": "checkpoint", "req": "r1"}  # up_to is what it computed: no field
    lines += _admitted(m, b, 11, 2)
    release = ops.get("release")
    lines.append(release.record(m, RecordedCall("on_release", (b,), {"checkpointed": False}, None, req_view(b))))
    lines.append(release.record(m, RecordedCall("on_release", (a,), {"checkpointed": True}, None, req_view(a))))
    assert lines[-2:] == [{"op": "release", "req": "r2", "insert": False}, {"op": "release", "req": "r1"}]
    assert not m.requests.running
    scenario = scenario_from_records(JSONL_HEADER, lines)
    timeline = run_scenario(scenario)
    assert timeline.passed, [r.failures for r in timeline.records]
    final = timeline.final
    # the prompt (1-4) is its own node: a Full-only checkpoint inserts the prompt apart
    assert sorted(final.path(n.id) for n in final.non_root()) == [(1, 2), (1, 2, 3), (1, 2, 3, 4), (1, 2, 3, 4, 5, 6)]


def test_a_request_the_ops_cannot_express_stays_tree_calls():
    m = TraceMapper(["full"])
    chunked = _live_req("c", [1, 2, 3, 4, 5, 6], committed=4)
    m.requests.matched(chunked, 5, [1, 2, 3, 4, 5, 6], None, 0, 0)
    chunked.extend_end = 4
    assert "chunked prefill" in m.requests.admit(m.requests.admission(5))
    capped = _live_req("k", [1, 2, 3])
    m.requests.matched(capped, 6, [1, 2], None, 0, 0)  # a key cut short (swa_reprefill_tail_tokens)
    capped.extend_end = 3
    assert "not its whole sequence" in m.requests.admit(m.requests.admission(6))
    hit = _live_req("h", [1, 2, 3])
    m.requests.matched(hit, 7, [1, 2, 3], None, 0, 2)
    hit.extend_end = 3
    assert "host tier" in m.requests.admit(m.requests.admission(7))
    assert not m.requests.running and m.requests.name("c") == "r1" and m.requests.name("h") == "r3"
    # untracked: its checkpoint and release write nothing (their tree calls are recorded instead)
    assert ops.get("checkpoint").record(m, RecordedCall("checkpoint", (chunked,), {"up_to": 4}, None, req_view(chunked))) is None
    assert ops.get("release").record(m, RecordedCall("on_release", (chunked,), {"checkpointed": True}, None,
                                                     req_view(chunked))) is None


def test_a_checkpoint_short_of_the_computed_length_and_a_stop_are_written():
    m = TraceMapper(["full"])
    req = _live_req("s", [1, 2, 3, 4])
    m.requests.matched(req, 3, [1, 2, 3, 4], None, 0, 0)
    req.extend_end = 4
    assert m.requests.admit(m.requests.admission(3)) is None
    step = ops.get("checkpoint").record(m, RecordedCall("checkpoint", (req,), {"up_to": 2}, None, req_view(req)))
    assert step == {"op": "checkpoint", "req": "r1", "up_to": 2}
    req.finished_len = 1
    step = ops.get("release").record(m, RecordedCall("on_release", (req,), {"checkpointed": True}, None, req_view(req)))
    assert step == {"op": "release", "req": "r1", "stop_at": 1}


def test_a_recorded_expectation_that_fails_is_reported(tmp_path):
    m = TraceMapper(["full"])
    step = keys.record_insert(m, [1, 2, 3, 4], None, 0, node=1, prefix_len=0, page_size=1)
    step["expect"]["full_evictable"] = 3  # the real cache would have said 4
    timeline = run_scenario(scenario_from_records(JSONL_HEADER, [step]))
    assert not timeline.passed and "full_evictable" in str(timeline.records[0].failures[0])


# ---- scenario features the recorder relies on ------------------------------------------------
def test_an_insert_may_name_its_node_for_a_lock(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    toml("s.toml", """
        [[step]]
        op = "insert"
        key = [1, 2, 3]
        as = "a"

        [[step]]
        op = "lock"
        match = "a"
        as = "L"
        expect = { full_protected = 3, full_evictable = 0 }
    """)
    rc, out, err = urc(capsys, "run", "s.toml")
    assert rc == 0, out + err
    toml("dup.toml", """
        [[step]]
        op = "insert"
        key = [1]
        as = "a"

        [[step]]
        op = "match"
        key = [1]
        as = "a"
    """)
    with pytest.raises(ScenarioError, match=r"dup.toml:18: match name 'a' is already taken \(named at line 10\)"):
        load_scenario("dup.toml")


def test_a_jsonl_comment_line_is_skipped_and_errors_keep_their_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    jsonl("c.jsonl", {"op": "insert", "key": [1]}, raw_lines=("# a note", "  # indented note", '{"op": "bogus"}'))
    with pytest.raises(ScenarioError, match=r"c.jsonl:5: unknown op 'bogus'"):
        load_scenario("c.jsonl")


# ---- canonical state -----------------------------------------------------------------------
def _state(nodes=None, leaves=(), lru=None, pools=None) -> CanonicalState:
    nodes = nodes if nodes is not None else {(None, (1, 2)): NodeState(2, 1, {"full": (2, 0), "swa": (2, 0)})}
    return CanonicalState(nodes, frozenset(leaves), lru or {"swa": tuple(nodes)}, pools or {"full": (10, 2, 0)})


def test_first_difference_names_the_field_and_the_node():
    a = _state()
    assert first_difference(a, _state()) is None
    d = first_difference(a, _state(pools={"full": (9, 2, 0)}))
    assert (d.field, d.ours, d.theirs) == ("pools.full.available", 10, 9)
    locked = {(None, (1, 2)): NodeState(2, 8, {"full": (2, 1), "swa": (2, 0)})}
    d = first_difference(a, _state(nodes=locked))
    assert (d.field, d.ours, d.theirs) == ("node.full.lock_ref", 0, 1)
    assert "the node ending at token 2 (…1, 2)" in d.where and "ours #1, SGLang #8" in d.where
    tomb = {(None, (1, 2)): NodeState(2, 1, {"full": (2, 0), "swa": (None, 0)})}
    assert first_difference(a, _state(nodes=tomb)).field == "node.swa.value_len"
    extra = {**a.nodes, (None, (1, 2, 3)): NodeState(1, 2, {"full": (1, 0), "swa": (1, 0)})}
    d = first_difference(a, _state(nodes=extra, lru={"swa": tuple(a.nodes)}))
    assert d.field == "nodes" and "ending at token 3" in d.where and "only in SGLang" in d.where
    assert first_difference(a, _state(leaves=[(None, (1, 2))])).field == "evictable_leaves"
    other = {**a.nodes, (None, (5,)): NodeState(1, 3, {"full": (1, 0), "swa": (1, 0)})}
    d = first_difference(_state(nodes=other, lru={"swa": ((None, (5,)), (None, (1, 2)))}),
                         _state(nodes=other, lru={"swa": ((None, (1, 2)), (None, (5,)))}))
    assert d.field == "lru.swa" and d.where == "position 0 (0 = most recent)"


def test_host_copies_and_host_pools_are_compared():
    node = {(None, (1, 2)): NodeState(2, 1, {"full": (None, 0), "swa": (None, 0)}, {"full": 2, "swa": None})}
    hosted = CanonicalState(node, frozenset(), {"swa": ()}, {"full": (10, 2, 0)}, {"full": (7, 9)})
    assert first_difference(hosted, hosted) is None
    gone = {(None, (1, 2)): NodeState(2, 1, {"full": (None, 0), "swa": (None, 0)}, {"full": None, "swa": None})}
    d = first_difference(hosted, CanonicalState(gone, frozenset(), {"swa": ()}, {"full": (10, 2, 0)}, {"full": (7, 9)}))
    assert (d.field, d.ours, d.theirs) == ("node.full.host_len", 2, None) and "ending at token 2" in d.where
    d = first_difference(hosted, CanonicalState(node, frozenset(), {"swa": ()}, {"full": (10, 2, 0)}, {"full": (9, 9)}))
    assert (d.field, d.ours, d.theirs) == ("host_pools.full.available", 7, 9)
    d = first_difference(hosted, CanonicalState(node, frozenset(), {"swa": ()}, {"full": (10, 2, 0)}))
    assert (d.field, d.ours, d.theirs) == ("host_pools.full", (7, 9), None)


def test_without_nodes_only_the_pools_are_compared():
    rust = CanonicalState(None, None, {}, {"full": (10, 2, 0)})
    assert first_difference(_state(), rust) is None
    assert first_difference(_state(), CanonicalState(None, None, {}, {"full": (10, 3, 0)})).field == "pools.full.evictable"


# ---- the launcher ------------------------------------------------------------------------
def _launch(*argv, cwd):
    return subprocess.run([sys.executable, "-m", "workbench.record", *argv], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


def test_the_launcher_refuses_bad_usage_and_never_overwrites(tmp_path):
    assert _launch("-o", "t.jsonl", cwd=tmp_path).returncode == 2  # no "--"
    assert "no such directory" in _launch("-o", "nodir/t.jsonl", "--", "true", cwd=tmp_path).stderr
    assert _launch("-o", "t.jsonl", "--", cwd=tmp_path).returncode == 2  # no command
    assert "traces end in .jsonl" in _launch("-o", "t.txt", "--", "true", cwd=tmp_path).stderr
    (tmp_path / "t.jsonl").write_text("keep me\n")
    proc = _launch("-o", "t.jsonl", "--", "true", cwd=tmp_path)
    assert proc.returncode == 2 and "exists" in proc.stderr and (tmp_path / "t.jsonl").read_text() == "keep me\n"
    proc = _launch("-o", "t.jsonl", "--force", "--", sys.executable, "-c", "import os; print(os.environ['URC_RECORD'])",
                   cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == str(tmp_path / "t.jsonl")
    assert not (tmp_path / "t.jsonl").exists()  # replaced: nothing recorded it again
    assert _launch("-o", "t.jsonl", "--", sys.executable, "-c", "raise SystemExit(7)", cwd=tmp_path).returncode == 7


def test_each_recorded_cache_claims_its_own_file(tmp_path):
    base = tmp_path / "trace.jsonl"
    assert [next_free(base).name for _ in range(3)] == ["trace.jsonl", "trace.2.jsonl", "trace.3.jsonl"]


def test_attach_refuses_an_existing_file_without_force(tmp_path):
    from workbench.record import attach

    fake = SimpleNamespace(_components_tuple=[SimpleNamespace(component_type=SimpleNamespace(name="FULL"))],
                           page_size=1, token_to_kv_pool_allocator=SimpleNamespace(size=64, size_full=None))
    (tmp_path / "t.jsonl").write_text("keep\n")
    with pytest.raises(FileExistsError, match="exists"):
        attach(fake, tmp_path / "t.jsonl")
    assert (tmp_path / "t.jsonl").read_text() == "keep\n"


# ---- the TUI's divergence banner -------------------------------------------------------------
@pytest.mark.asyncio
async def test_the_tui_shows_where_sglang_diverged_from_that_step_on():
    import io

    from rich.console import Console

    from workbench.tui.app import WorkbenchApp
    from workbench.tui.widgets.divergence_banner import DivergenceBanner

    tour = load_scenario(ROOT / "scenarios" / "tour.toml")
    text = "step 3 (lock) diverges from SGLang 0.5.23: node.full.lock_ref ours 1 SGLang 2"
    app = WorkbenchApp([tour], background=False, divergences={tour.path: (3, text)})
    async with app.run_test(size=(160, 50)) as pilot:
        banner = app.query_one(DivergenceBanner)
        seen = []
        for _ in range(4):
            console = Console(width=300, file=io.StringIO(), record=True)
            console.print(banner.content)
            seen.append((app.cursor.step, banner.display, console.export_text().strip()))
            await pilot.press("n")
    assert [(step, shown) for step, shown, _ in seen] == [(0, False), (1, False), (2, False), (3, True)]
    assert seen[3][2] == f"≠ SGLang diverges at this step: {text}"


def test_a_recording_that_cannot_start_never_stops_the_program(tmp_path, monkeypatch, capsys):
    """The start-up hook's attach fails (here: the trace's folder is gone): the cache is
    built and works, unrecorded, with one line saying so."""
    import types

    from workbench.record import hook

    class UnifiedRadixCache:
        def __init__(self, size):
            self.size = size

    module = types.SimpleNamespace(UnifiedRadixCache=UnifiedRadixCache)
    monkeypatch.setenv(hook.ENV, str(tmp_path / "gone" / "t.jsonl"))
    hook.patch(module)
    cache = UnifiedRadixCache(8)
    assert cache.size == 8 and getattr(cache, "_urc_recorder", None) is None
    assert "not recording this cache (FileNotFoundError" in capsys.readouterr().err


def test_a_divergence_exits_1_with_both_sides(capsys, monkeypatch):
    """What urc run --against prints and returns when a file diverges (the comparison
    itself is stood in for: it needs SGLang; tests/bridge/test_bridge_sglang.py runs it)."""
    from workbench.bridge import differential
    from workbench.bridge.canonical import Difference

    def diverging(scenario, core, allow_version, every):
        report = differential.DifferentialReport(scenario.path, "0.5.23", core, len(scenario.steps), run=3)
        report.divergence = differential.Divergence(3, 21, "lock", Difference("node.full.lock_ref", 1, 2, "the node"))
        return report

    monkeypatch.setattr(differential, "run_against", diverging)
    rc, out, err = urc(capsys, "run", "--against", "sglang", SMOKE)
    assert rc == 1, err
    assert out.splitlines() == [f"{SMOKE}:21: step 3 (lock) diverges from SGLang 0.5.23 (python tree core): "
                                "node.full.lock_ref", "  at      the node", "  ours    1", "  SGLang  2"]
    rc, out, err = urc(capsys, "run", "--against", "sglang", "--json", SMOKE)
    report = json.loads(out)[0]
    assert rc == 1 and not report["agrees"]
    assert report["divergence"] == {"step": 3, "line": 21, "op": "lock", "field": "node.full.lock_ref", "ours": 1,
                                    "sglang": 2, "where": "the node"}


def test_session_calls_are_written_as_session_ops_and_replay(tmp_path):
    """open_radix_session / release_radix_session become session_open / session_release
    (the controller's repeat release is left out), a session request's admission names
    its session, an aborted finish says so, and a streaming turn stays tree calls."""
    m = TraceMapper(["full"])
    session_open, session_release = ops.get("session_open"), ops.get("session_release")
    lines = [session_open.record(m, RecordedCall("open_radix_session", ("s1",), {}, 1, None))]
    req = _live_req("rid-a", [1, 2, 3, 4])
    req.session_id = "s1"
    lines += _admitted(m, req, 0, 0)
    assert lines[-2] == {"op": "req_prefill", "req": "r1", "tokens": [1, 2, 3, 4], "session": "s1",
                         "expect": {"prefix_len": 0}}
    req.finished_reason = type("FINISH_ABORT", (), {})()
    step = ops.get("release").record(m, RecordedCall("on_release", (req,), {"checkpointed": True}, None, req_view(req)))
    assert step == {"op": "release", "req": "r1", "abort": True}
    lines.append(step)
    close = RecordedCall("release_radix_session", ("s1",), {}, 0, None)
    lines += [session_release.record(m, close), session_release.record(m, close)]
    assert lines[-2:] == [{"op": "session_release", "session": "s1"}, None]
    lines.pop()
    header = {**JSONL_HEADER, "config": {**JSONL_HEADER["config"], "session_radix_cache": True}}
    timeline = run_scenario(scenario_from_records(header, lines))
    assert timeline.passed, [r.failures for r in timeline.records]
    released = timeline.state_after(len(lines) - 1).to_snapshot()  # after the aborted release (steps count from 1)
    assert len(released.nodes) > 1 and not any(c.session_ref for n in released.nodes for c in n.components.values())
    turn = _live_req("rid-t", [5, 6])
    turn.session = SimpleNamespace(streaming=True)
    m.requests.matched(turn, 0, [5, 6], None, 0, 0)
    turn.extend_end = 2
    assert "streaming session" in m.requests.admit(m.requests.admission(0))


def test_node_depths_are_compared_only_where_the_other_side_reads_them():
    """SGLang's Rust tree core shows no nodes: its side reports a depth as None, which
    is left out there, while every other result still counts."""
    from workbench.bridge.differential import _compare_results

    ours, rust = {"prefix_len": 3, "last_node_depth": 3}, {"prefix_len": 3, "last_node_depth": None}
    assert _compare_results(ours, None, rust, None, ops.NODE_RESULTS) is None
    assert _compare_results(ours, None, rust, None).field == "result.last_node_depth"
    assert _compare_results(ours, None, {**rust, "prefix_len": 2}, None, ops.NODE_RESULTS).field == "result.prefix_len"


# ---- the rows SGLang's side is built with ---------------------------------------------------
def test_a_release_with_a_stop_keeps_its_row_counted(tmp_path, monkeypatch):
    """Ours refuses a stop outside what a request holds without sending it to SGLang,
    where the request runs on: its row must still be there for the next admission."""
    from workbench.bridge.sglang_side import request_sizes

    monkeypatch.chdir(tmp_path)
    steps = """
        [[step]]
        op = "req_prefill"
        req = "r1"
        tokens = [1, 2]
        [[step]]
        op = "release"
        req = "r1"
        stop_at = 0
        [[step]]
        op = "req_prefill"
        req = "r2"
        tokens = [3]
        [[step]]
        op = "release"
        req = "r2"
    """
    rows, _ = request_sizes(load_scenario(toml("s.toml", steps)))
    assert rows == 2 + 2  # r1 and r2 may run at once, plus the two spare rows
    plain = steps.replace("stop_at = 0", "")
    assert request_sizes(load_scenario(toml("p.toml", plain)))[0] == 1 + 2
