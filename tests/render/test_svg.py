"""``urc svg``: DOT goldens for small states, SVGs parsed as XML (every node id, the
legend, the highlight classes), one test per change kind, and folding that says what
it folded."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import graphviz
import pytest

from urc_util import urc
from workbench.model.timeline.runner import Runner, run_scenario
from workbench.model.scenarios.scenario import scenario_from_records
from workbench.render.picture import picture

ROOT = Path(__file__).resolve().parents[2]
GOLDENS = Path(__file__).resolve().parents[1] / "goldens"
SMOKE = ROOT / "scenarios" / "smoke.toml"
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
SVG = "{http://www.w3.org/2000/svg}"


def timeline_of(config: dict, steps: list[dict]):
    return Runner(scenario_from_records({"schema": 1, "scenario": {"name": "t"}, "config": config}, steps)).run()


def svg_nodes(svg: str) -> dict[str, set[str]]:
    """id -> classes of every <g> drawn for a node."""
    root = ET.fromstring(svg)
    return {g.get("id"): set(g.get("class", "").split()) for g in root.iter(f"{SVG}g") if "node" in g.get("class", "")}


@pytest.mark.parametrize("step, diff_from", [(2, None), (3, 2)])
def test_dot_matches_its_golden_and_is_deterministic(step, diff_from):
    first = picture(run_scenario(SMOKE), step, diff_from).source
    second = picture(run_scenario(SMOKE), step, diff_from).source
    assert first == second
    golden = GOLDENS / f"smoke-step{step}{'-diff' if diff_from is not None else ''}.dot"
    assert first == golden.read_text(encoding="utf-8")


@needs_dot
def test_svg_has_every_node_id_the_legend_and_tooltips():
    timeline = run_scenario(ROOT / "scenarios" / "tour.toml")
    state = timeline.state_after(5)
    svg = picture(timeline, 5, max_nodes=1000).pipe(format="svg", encoding="utf-8")
    drawn = svg_nodes(svg)
    assert "legend" in drawn
    for node_id in state.records:
        chain_member = not any(node_id == int(i[1:]) for i in drawn if i.startswith("n"))
        assert f"n{node_id}" in drawn or chain_member
    assert "tour — step 5" in svg and "<title>n0</title>" in svg
    assert "xlink:title=\"node #" in svg  # the tooltip with full details


@needs_dot
@pytest.mark.parametrize("kind, config, steps, node_of", [
    ("added", {"components": ["full"], "kv_size": 32}, [{"op": "insert", "key": [1, 2]}], lambda t: 1),
    ("split", {"components": ["full"], "kv_size": 32},
     [{"op": "insert", "key": [1, 2, 3, 4]}, {"op": "match", "key": [1, 2, 9], "as": "m"}], lambda t: 2),
    ("lock_ref", {"components": ["full"], "kv_size": 32},
     [{"op": "insert", "key": [1, 2]}, {"op": "match", "key": [1, 2], "as": "m"}, {"op": "lock", "match": "m", "as": "l"}],
     lambda t: 1),
    ("tombstoned", {"components": ["full", "swa"], "kv_size": 32, "sliding_window": 2},
     [{"op": "insert", "key": [1, 2, 3, 4]}, {"op": "insert", "key": [1, 2, 3, 4, 5, 6]}, {"op": "evict", "swa": 1}],
     lambda t: next(i for i, r in t.final.records.items() if r.components[1].value_len is None and r.parent is not None)),
    ("recovered", {"components": ["full", "swa"], "kv_size": 32, "sliding_window": 2},
     [{"op": "insert", "key": [1, 2, 3, 4]}, {"op": "insert", "key": [1, 2, 3, 4, 5, 6]}, {"op": "evict", "swa": 1},
      {"op": "insert", "key": [1, 2, 3, 4]}],
     lambda t: next(iter(t.diff(len(t) - 1, len(t)).recovered["swa"]))),
])
def test_each_change_kind_is_a_class_on_the_changed_node(kind, config, steps, node_of):
    timeline = timeline_of(config, steps)
    n = len(timeline)
    svg = picture(timeline, n, n - 1).pipe(format="svg", encoding="utf-8")
    drawn = svg_nodes(svg)
    assert f"changed-{kind}" in drawn[f"n{node_of(timeline)}"], drawn


@needs_dot
def test_an_evicted_node_is_drawn_as_a_ghost():
    timeline = timeline_of({"components": ["full"], "kv_size": 32},
                           [{"op": "insert", "key": [1, 2]}, {"op": "insert", "key": [5, 6]}, {"op": "evict", "full": 2}])
    diff = timeline.diff(2, 3)
    svg = picture(timeline, 3, 2).pipe(format="svg", encoding="utf-8")
    (gone,) = diff.removed
    assert {"ghost", "changed-removed"} <= svg_nodes(svg)[f"n{gone}"]


def test_single_child_chains_fold_and_say_so():
    steps = [{"op": "insert", "key": [1, 2, 3, 4, 5, 6][:k]} for k in range(1, 7)]  # a chain of six nodes
    timeline = timeline_of({"components": ["full"], "kv_size": 64}, steps)
    dot = picture(timeline, len(timeline)).source
    assert "#1 +5" in dot and "5 nodes folded into chains" in dot
    assert dot.count("tree-node") == 1  # one drawn node holds the whole chain
    unfolded = picture(timeline, len(timeline), len(timeline) - 1).source  # changed nodes never fold
    assert "folded into chains" not in unfolded and unfolded.count("tree-node") == 6
    assert "evictable-leaf changed-added" in unfolded


def test_nodes_beyond_max_nodes_fold_into_placeholders_that_say_what_they_hold():
    steps = [{"op": "insert", "key": [i, 100]} for i in range(1, 41)]
    timeline = timeline_of({"components": ["full"], "kv_size": 256}, steps)
    dot = picture(timeline, 40, max_nodes=10).source
    assert dot.count('class="tree-node') + dot.count("class=tree-node") <= 10
    assert "31 nodes, 62 tokens folded (31 branches)" in dot
    assert "31 nodes beyond --max-nodes 10 folded" in dot


# ---- the command -----------------------------------------------------------------------------


@needs_dot
def test_urc_svg_writes_a_file_and_refuses_to_overwrite_it(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = urc(capsys, "svg", str(SMOKE), "--step", "3")
    assert rc == 0 and "wrote smoke-step3.svg" in err
    ET.fromstring(Path("smoke-step3.svg").read_text())
    rc, out, err = urc(capsys, "svg", str(SMOKE), "--step", "3")
    assert rc == 2 and "file exists" in err
    rc, out, err = urc(capsys, "svg", str(SMOKE), "--dot", "-o", "-")
    assert rc == 0 and out.startswith("digraph step5 {")


def test_without_dot_the_dot_text_is_written_and_the_fix_named(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def missing(*args, **kwargs):
        raise graphviz.ExecutableNotFound(("dot",))

    monkeypatch.setattr(graphviz.Digraph, "pipe", missing)
    rc, out, err = urc(capsys, "svg", str(SMOKE), "-o", "pic.svg")
    assert rc == 2 and "wrote the DOT text to pic.dot" in err and "apt-get install graphviz" in err
    assert Path("pic.dot").read_text().startswith("digraph") and not Path("pic.svg").exists()


@pytest.mark.parametrize("argv, says", [
    (["--step", "9"], "--step must be between 0 and 5"),
    (["--diff", "-1"], "--diff must be between 0 and 5"),
    (["--max-nodes", "0"], "--max-nodes must be at least 1"),
])
def test_bad_svg_options_are_one_line_errors(capsys, argv, says):
    rc, out, err = urc(capsys, "svg", str(SMOKE), *argv)
    assert rc == 2 and says in err and len(err.strip().splitlines()) == 1


def test_a_host_only_node_is_drawn_as_host_and_the_legend_says_so():
    timeline = run_scenario(ROOT / "scenarios" / "tour_hicache_hybrid.toml")
    demoted = picture(timeline, 5).source  # C1 = node #1 is host-only for all three components
    node = next(line for line in demoted.splitlines() if line.strip().startswith("n1 "))
    assert node.count("<B>HOST 4</B>") == 2 and "<B>HOST 1</B>" in node and "host-only-full" in node
    assert "HOST n: host-only" in demoted
    in_flight = picture(timeline, 1).source  # both backups held until the flush
    assert in_flight.count("⇡backup") >= 2 and "+host" in in_flight
    assert "HOST n:" not in picture(run_scenario(SMOKE), 2).source  # no host tier: the usual legend


@needs_dot
def test_the_running_requests_are_a_table_with_what_the_step_did_to_them():
    timeline = run_scenario(ROOT / "scenarios" / "tour.toml")  # step 12: r1's chunk moved its lock
    svg = picture(timeline, 12, 11).pipe(format="svg", encoding="utf-8")
    assert "requests" in svg_nodes(svg)["requests"]
    text = "".join(ET.fromstring(svg).itertext())
    assert "running requests" in text and "prefix" in text and "committed" in text
    node = timeline.state_after(12).requests[0].lock_node
    assert f"▲ prefix grew 6 → 11 (+5); inserted 0 → 11; lock moved from #4 to #{node}" in text
    ended = "".join(ET.fromstring(picture(timeline, 13, 12).pipe(format="svg", encoding="utf-8")).itertext())
    assert "r1: ended: it held 0 own slots past a prefix of 11" in ended
    assert "requests" not in svg_nodes(picture(timeline, 5).pipe(format="svg", encoding="utf-8"))  # none running


@needs_dot
def test_session_nodes_carry_a_badge_and_the_sessions_are_a_table():
    timeline = timeline_of({"components": ["full", "mamba"], "kv_size": 64, "mamba_size": 6,
                            "session_radix_cache": True},
                           [{"op": "session_open", "session": "s1"},
                            {"op": "req_prefill", "req": "r1", "tokens": [1, 2, 3, 4], "session": "s1"},
                            {"op": "release", "req": "r1"},
                            {"op": "req_prefill", "req": "r2", "tokens": [1, 2, 9]},
                            {"op": "release", "req": "r2"}])
    svg = picture(timeline, 5).pipe(format="svg", encoding="utf-8")
    (frontier,) = timeline.state_after(5).sessions.leaves["s1"]["full"]
    parent = timeline.state_after(5).record(frontier).parent
    nodes = svg_nodes(svg)
    assert {"session-held", "session-frontier"} <= nodes[f"n{frontier}"]
    assert "session-held" in nodes[f"n{parent}"] and "session-frontier" not in nodes[f"n{parent}"]
    assert not any("session-held" in classes for name, classes in nodes.items()
                   if name.startswith("n") and name not in (f"n{frontier}", f"n{parent}"))
    text = "".join(ET.fromstring(svg).itertext())
    # Full and Mamba tag the frontier (the legend names the badge once more); only Full's path covers the parent
    assert text.count("§1=s1") == 3 and "§n: n sessions hold it" in text
    assert "sessions" in nodes["sessions"]
    assert "s1" in text and "open" in text and "full:4 mamba:1" in text  # its coverage holds 4 tokens, 1 state
    assert "sessions" not in svg_nodes(picture(run_scenario(SMOKE), 2).pipe(format="svg", encoding="utf-8"))


def test_a_long_key_s_tooltip_says_its_length_once_and_ends_with_its_last_token():
    from workbench.render.dot import _key_text
    from cache.basics.keys import RadixKey

    key = RadixKey(list(range(1, 101))).data
    assert _key_text(key, 100) == "[1 2 3 … 99 100] (100 tokens)"
    assert _key_text(RadixKey([7]).data, 1) == "[7]"


@needs_dot
def test_labels_keep_their_spaces_and_the_root_reads_as_root():
    """SVG drops a <text>'s leading space: Graphviz's "root" + " full, swa" read "rootfull, swa"."""
    from workbench.render.dot import render_svg

    svg = render_svg(picture(run_scenario(ROOT / "scenarios" / "tour_swa.toml"), 3, 2))
    texts = ["".join(t.itertext()) for t in ET.fromstring(svg).iter(f"{SVG}text")]
    assert not [t for t in texts if t.startswith(" ") or t.endswith(" ")], texts
    assert "root" in texts and "\u00a0(full, swa)" in texts


@needs_dot
def test_a_wide_tree_is_folded_to_a_readable_width_and_says_so():
    """210 leaves side by side drew 27,789 pt wide at 10 pt text: at most MAX_LEAVES now."""
    from workbench.render.dot import render_svg
    from workbench.render.picture import MAX_LEAVES

    steps = [{"op": "insert", "key": [i, 100]} for i in range(1, 211)]
    timeline = timeline_of({"components": ["full"], "kv_size": 1024}, steps)
    svg = render_svg(picture(timeline, 210))
    width = float(ET.fromstring(svg).get("width").removesuffix("pt"))
    assert width <= 140 * (MAX_LEAVES + 2), width
    assert f"nodes folded to keep the picture at most {MAX_LEAVES} nodes wide" in svg
