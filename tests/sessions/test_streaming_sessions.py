"""Streaming sessions and the scheduler's session controller against SGLang 0.5.23.

``tests/oracle_sessions/NAME.out.jsonl`` is what SGLang 0.5.23 answered for
``NAME.jsonl`` (../shared/oracle/ext_oracle.py, page size 1: its stream_turn runs only
there; the two ``streaming_*_full_p1`` files are its own examples). The driver below
runs the same ops through our cache API and every field both sides report must agree:
prefix lengths, whether a turn borrowed the slot, the slot's lengths, lock depth and
publishing flag, the controller's flags, each pool's free/evictable/protected sizes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cache.controller.unified_radix_cache import UnifiedRadixCache
from cache.basics.errors import CacheError
from cache.observe.events import Cause, EventKind, EventLog
from cache.checks.invariants import check_invariants
from cache.basics.params import EvictParams, InsertParams
from cache.sessions.controller import INFLIGHT, SessionClosed, SessionOpened, TurnRejected
from cache.sessions.streaming import VIRTUAL_NODE, StreamingTurn

CASES = Path(__file__).resolve().parents[1] / "oracle_sessions"


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def _avail(cache) -> dict:
    return {name: cache.available_size(name) for name in cache.config.components}


def _slot(cache, sid: str):
    view = cache.snapshot().streaming_sessions
    slot = view.slots.get(sid) if view else None
    if slot is None:
        return None
    depth = None if slot.lock_node is None else int(cache.path_device_indices(slot.lock_node).shape[0])
    return {"holds_kv": slot.holds_kv, "cache_protected_len": slot.cache_protected_len,
            "kv_committed_len": slot.kv_committed_len, "kv_allocated_len": slot.kv_allocated_len,
            "lock_node_depth": depth, "publishes_prompt": slot.publishes_prompt}


def _summary(cache, req) -> dict:
    out = {"cache_protected_len": req.cache_protected_len, "kv_committed_len": req.kv_len, "available": _avail(cache)}
    if "swa" in cache.config.components:
        out["swa_evicted_seqlen"] = req.swa_evicted_seqlen
    return out


def _step(cache, reqs: dict, op: dict) -> dict:
    kind = op["op"]
    if kind == "session_open":
        opened = cache.open_session(op["session"], op.get("streaming", False))
        return {"success": opened.success, "generation": opened.generation}
    if kind == "session_release":
        closed = cache.close_session(op["session"])
        return {"in_controller": closed.in_controller, "deferred": closed.deferred,
                "slot_released": closed.slot_released, "available": _avail(cache)}
    if kind == "session_reap":
        return {"closed": list(cache.reap_sessions()), "available": _avail(cache)}
    if kind == "stream_turn":
        turn = cache.stream_turn(op["session"], op["as"], op["tokens"], op.get("max_new_tokens"),
                                 op.get("priority", 0), op.get("checkpoint", True))
        if isinstance(turn, TurnRejected):
            return {"aborted": turn.message, "session_inflight": turn.session_inflight, "slot": _slot(cache, op["session"])}
        reqs[op["as"]] = turn
        return {"prefix_len": turn.prefix_len, "borrowed_slot": turn.borrowed_slot, "input_len": len(turn.origin_input_ids),
                **_summary(cache, turn), "slot": _slot(cache, op["session"])}
    if kind == "req_open":
        req = reqs[op["as"]] = cache.new_request(op["tokens"], rid=op["as"])
        return {"prefix_len": req.cache_protected_len, **_summary(cache, req)}
    if kind == "req_extend":
        req = reqs[op["req"]]
        cache.extend_request(req, op["tokens"], slide=op.get("slide_window", False))
        return _summary(cache, req)
    if kind == "req_checkpoint":
        req = reqs[op["req"]]
        cache.checkpoint(req, op.get("up_to"))
        return _summary(cache, req)
    if kind == "req_finish":
        req = reqs.pop(op["req"])
        sid = getattr(req, "session", None)
        req.finish_aborted = bool(op.get("abort", False))
        cache.release_kv_cache(req, checkpoint=op.get("insert", not req.finish_aborted))
        return {"available": _avail(cache), **({"slot": _slot(cache, sid)} if sid is not None else {})}
    if kind == "insert":
        key = op["key"]
        value = cache.alloc_kv(len(key))
        cache.write_kv(value, key)
        params = InsertParams(key, value)
        if "mamba" in cache.config.components:
            params.mamba_value = cache.alloc_mamba_state(key)
        return {"prefix_len": cache.insert(params).prefix_len}
    if kind == "evict":
        return {"full": cache.evict(EvictParams(op.get("full", 0), op.get("swa", 0), op.get("mamba", 0))).num_tokens_evicted}
    snap = cache.snapshot()  # dump, sizes
    out = {"available": _avail(cache), "sizes": {name: {"evictable": snap.pools[name].evictable,
                                                         "protected": snap.pools[name].protected}
                                                  for name in cache.config.components if name != "mamba"}}
    view = snap.streaming_sessions
    if kind == "dump" and view is not None:
        out["sessions"] = {}
        if view.controller:
            out["sessions"]["controller"] = {sid: {"streaming": s.streaming, "inflight": s.inflight,
                                                   "close_on_finish": s.close_on_finish, "req_nodes": s.req_nodes}
                                             for sid, s in view.controller.items()}
        if view.slots:
            out["sessions"]["streaming_slots"] = {sid: _slot(cache, sid) for sid in view.slots}
    return out


def replay(case: Path) -> tuple[list[tuple[dict, dict, dict]], UnifiedRadixCache, list[set[str]]]:
    """(op, ours, SGLang's) per op, the cache, and the invariant names violated after each op."""
    ops, answers = _rows(case), _rows(case.with_name(case.stem + ".out.jsonl"))
    cache = UnifiedRadixCache(device="cpu", **{k: v for k, v in ops[0].items() if k != "swa_kv_size"})
    reqs: dict = {}
    out, violated = [], []
    for op, want in zip(ops[1:], answers[1:]):
        out.append((op, _step(cache, reqs, op), want))
        violated.append({v.name for v in check_invariants(cache)})
    return out, cache, violated


def _differences(rows) -> list[str]:
    diffs = []
    for op, ours, want in rows:
        for key, value in ours.items():
            theirs = want.get(key)
            if key == "sizes":
                theirs = {name: s for name, s in (theirs or {}).items() if name in value}
            if key == "sessions" and theirs is not None:
                theirs = {k: v for k, v in theirs.items() if k in ("controller", "streaming_slots")}
            if theirs != value:
                diffs.append(f"{op}: {key} ours {value} sglang {theirs}")
    return diffs


@pytest.mark.parametrize("case", sorted(p for p in CASES.glob("*.jsonl") if not p.name.endswith(".out.jsonl")),
                         ids=lambda p: p.stem)
def test_matches_sglang_0_5_23(case: Path):
    rows, cache, violated = replay(case)
    assert _differences(rows) == []
    assert sum(len(ours) for _, ours, _ in rows) > 2 * len(rows)  # the answers were compared, not skipped
    allowed = {"session.record_shared"} if "concurrent" in case.stem else set()
    assert all(names <= allowed for names in violated), violated
    assert not cache.session_slots and not cache.requests
    assert _avail(cache) == {name: cache.total_size(name) for name in cache.config.components}


def test_the_concurrent_turn_example_flags_the_shared_record():
    """SGLang's suspected bug, reproduced: t3 is rejected but clears the flag, t4 then
    borrows (and rewinds) the record t2 still runs on; the invariant names it while both run."""
    rows, _, violated = replay(CASES / "streaming_concurrent_turn_full_p1.jsonl")
    names = [op.get("as") or op["op"] for op, _, _ in rows]
    rejected = rows[names.index("t3")][1]
    assert rejected["aborted"] == INFLIGHT and rejected["session_inflight"] is False
    assert rows[names.index("t4")][1]["borrowed_slot"] is True
    assert "session.record_shared" in violated[names.index("t4")]
    assert violated[-1] == set()


def _cache(**kw) -> UnifiedRadixCache:
    return UnifiedRadixCache(device="cpu", **{"kv_size": 64, **kw})


def test_open_close_and_deferred_close():
    cache = _cache()
    assert cache.open_session("s1", streaming=True) == SessionOpened(True, None)
    assert cache.open_session("s1") == SessionOpened(False, None)  # already open
    assert cache.close_session("nope") == SessionClosed(None, False, False, False)
    t1 = cache.stream_turn("s1", "t1", [1, 2, 3])
    assert isinstance(t1, StreamingTurn) and t1.last_node == VIRTUAL_NODE and t1.lock is None
    view = cache.snapshot().requests[0]
    assert (view.session, view.streaming) == ("s1", True)
    assert cache.close_session("s1").deferred
    with pytest.raises(CacheError, match="closing"):
        cache.stream_turn("s1", "t2", [4])
    assert cache.reap_sessions() == ()  # the turn still runs: deferred again
    cache.release_kv_cache(t1)
    assert cache.snapshot().streaming_sessions.controller["s1"].close_on_finish
    assert cache.reap_sessions() == ("s1",)
    assert cache.snapshot().streaming_sessions is None and check_invariants(cache) == []
    assert cache.available_size() == 61  # the published prompt stays in the tree, unlocked
    assert cache.evictable_size() == 3


def test_a_plain_session_takes_no_turns_and_closes_at_once():
    cache = _cache()
    cache.open_session("p")
    with pytest.raises(CacheError, match="streaming"):
        cache.stream_turn("p", "t", [1])
    assert cache.close_session("p") == SessionClosed(None, True, False, False)


def test_a_stop_trims_the_record_and_the_next_turns_history():
    """try_cache_finished_req: the KV past the stop goes back, the output is cut at it,
    and the next turn's history is input + output through the stop."""
    cache = _cache()
    cache.open_session("s", streaming=True)
    t1 = cache.stream_turn("s", "t1", [1, 2, 3])
    cache.extend_request(t1, [4, 5, 6])
    t1.finished_len = 1
    free = cache.available_size()
    cache.release_kv_cache(t1)
    assert cache.available_size() == free + 2 and t1.output_ids == [4]
    assert cache.snapshot().streaming_sessions.slots["s"].kv_committed_len == 4
    t2 = cache.stream_turn("s", "t2", [7])
    assert t2.origin_input_ids == [1, 2, 3, 4, 7] and t2.prefix_len == 4 and t2.borrowed_slot
    assert check_invariants(cache) == []


def test_slot_events_say_take_borrow_keep_hand_back_and_release():
    cache = _cache()
    log = EventLog(cache.events)
    cache.open_session("s", streaming=True)
    t1 = cache.stream_turn("s", "t1", [1, 2, 3])
    cache.release_kv_cache(t1)
    t2 = cache.stream_turn("s", "t2", [4])
    t2.finish_aborted = True
    cache.release_kv_cache(t2, checkpoint=False)
    t3 = cache.stream_turn("s", "t3", [5])
    cache.release_kv_cache(t3)
    cache.close_session("s")
    slots = [(e.cause, e.detail.split(": ", 1)[1]) for e in log.take() if e.kind is EventKind.SLOT]
    assert slots == [
        (Cause.REQUEST, "taken from t1"), (Cause.REQUEST, "kept from t1"),
        (Cause.REQUEST, "borrowed by t2: prefix 3"), (Cause.ABORT, "handed back to t2"),
        (Cause.REQUEST, "taken from t3"), (Cause.REQUEST, "kept from t3"), (Cause.SESSION, "released"),
    ]
    assert cache.available_size() == 64 - cache.evictable_size() and check_invariants(cache) == []


def test_closing_after_a_rejected_turn_drops_the_turn_still_running():
    """A rejected turn clears the in-flight flag, so a close is not deferred and frees
    the record under the running turn (SGLang keeps decoding it on the freed row; we
    drop it, so nothing runs on freed KV)."""
    cache = _cache()
    cache.open_session("s", streaming=True)
    cache.release_kv_cache(cache.stream_turn("s", "t1", [1, 2]))
    t2 = cache.stream_turn("s", "t2", [3])
    assert isinstance(cache.stream_turn("s", "t3", [4]), TurnRejected)
    closed = cache.close_session("s")
    assert not closed.deferred and closed.slot_released
    assert "t2" not in cache.requests and t2.session is None
    with pytest.raises(CacheError, match="not running"):
        cache.extend_request(t2, [5])
    assert check_invariants(cache) == [] and cache.available_size() + cache.evictable_size() == 64


def test_a_streaming_turn_cannot_be_retracted():
    cache = _cache()
    cache.open_session("s", streaming=True)
    turn = cache.stream_turn("s", "t1", [1, 2])
    with pytest.raises(CacheError, match="not modelled"):
        cache.retract(turn)


def test_a_turn_whose_checkpoint_asserts_runs_on_and_its_name_stays_usable(tmp_path):
    """Admitted, a turn's post-prefill checkpoint can hit SGLang's Mamba assert: the
    step is refused, yet the turn runs on (as on SGLang's side), so a scenario written
    from such a run uses its name again and loads."""
    from workbench.model.scenarios.scenario import load_scenario
    from workbench.model.timeline.runner import Runner

    path = tmp_path / "turn.toml"
    path.write_text('''schema = 1
[scenario]
name = "turn"
[config]
components = ["full", "mamba"]
kv_size = 48
mamba_size = 2
session_radix_cache = true
[[step]]
op = "insert"
key = [9]
[[step]]
op = "req_prefill"
req = "r0"
tokens = [7]
[[step]]
op = "session_open"
session = "s1"
streaming = true
[[step]]
op = "stream_turn"
req = "r1"
tokens = [1, 2]
session = "s1"
expect_error = "cannot alloc mamba cache"
[[step]]
op = "req_decode"
req = "r1"
tokens = [3]
[[step]]
op = "release"
req = "r1"
''')
    run = Runner(load_scenario(path)).run()
    assert [r.error is None for r in run.records] == [True, True, True, False, True, True], [r.error for r in run.records]


def test_an_eagle_turn_matches_the_pairs_the_tree_holds():
    """EAGLE keys token pairs: a first turn's history minus its last token is matched
    as pairs, and the room for its KV is sized from the same pairs (SGLang 0.5.23 agrees
    through the bridge: the turn borrows nothing and matches 4 pairs)."""
    cache = _cache(is_eagle=True)
    req = cache.new_request([1, 2, 3, 4, 5], rid="a")
    cache.release_kv_cache(req)  # the tree holds 4 pairs
    free = cache.available_size()
    cache.open_session("s1", streaming=True)
    turn = cache.stream_turn("s1", "t1", [1, 2, 3, 4, 5, 6])
    assert isinstance(turn, StreamingTurn) and turn.prefix_len == 4
    assert cache.available_size() == free - 2  # only the two tokens past the matched pairs
    assert check_invariants(cache) == []
