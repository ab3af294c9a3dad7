"""``Timeline.diff``: one test per change kind on a small scenario, with the exact diff
and its text; then the diff computed from the deltas against comparing two whole
states, the empty diff, the reverse diff, and that no whole-tree view is built."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from workbench.model.timeline.diff import ChangeRow, change_rows, diff_states, diff_text
from workbench.model.timeline.runner import Runner
from workbench.model.scenarios.scenario import load_scenario, scenario_from_records
from workbench.model.timeline.states import TimelineState

ROOT = Path(__file__).resolve().parents[2]
FULL = {"components": ["full"], "kv_size": 64}
SWA = {"components": ["full", "swa"], "kv_size": 48, "sliding_window": 4, "swa_kv_size": 24}
MAMBA = {"components": ["full", "mamba"], "kv_size": 48, "mamba_size": 6}
WIDE_SWA = {"components": ["full", "swa"], "kv_size": 256, "sliding_window": 4, "swa_kv_size": 128}


def run(config, steps, all_succeed: bool = True):
    timeline = Runner(scenario_from_records({"schema": 1, "scenario": {"name": "diff"}, "config": config}, steps)).run()
    assert timeline.passed if all_succeed else not any(r.violations for r in timeline.records)
    return timeline


def node(timeline, step: int, *tokens: int) -> int:
    """The id of the node whose path is ``tokens`` after ``step`` (ids are the cache's)."""
    state = timeline.state_after(step)
    return next(i for i in state.records if state.path(i) == tokens)


def last(timeline):
    return timeline.diff(len(timeline) - 1, len(timeline))


def insert(*key):
    return {"op": "insert", "key": list(key)}


def test_added_node_and_pools():
    t = run(FULL, [insert(1, 2, 3, 4)])
    n = node(t, 1, 1, 2, 3, 4)
    d = t.diff(0, 1)
    assert (d.added, d.removed, d.splits) == ((n,), (), ())
    assert d.kinds(n) == {"added"} and d.records_after[n] == t.final.record(n)
    assert d.moved_to_mru == {"full": (n,)} and d.lru_moves == {}
    assert d.pools["full"].counters == {"available": (64, 60), "evictable": (0, 4)}
    assert diff_text(d) == [f"#{n} added under #0 (4 tokens)", f"full LRU: #{n} moved to the MRU end",
                            "full pool: available 64 → 60, evictable 0 → 4"]


def test_removed_node_keeps_its_record_as_a_ghost():
    t = run(FULL, [insert(1, 2, 3, 4), {"op": "evict", "full": 100}])
    n = node(t, 1, 1, 2, 3, 4)
    d = last(t)
    assert (d.added, d.removed) == ((), (n,))
    assert d.ghosts == {n: t.state_after(1).record(n)} and d.kinds(n) == {"removed"}
    assert diff_text(d) == [f"#{n} removed from under #0 (4 tokens)",
                            "full pool: available 60 → 64, evictable 4 → 0"]


def test_split_new_parent_and_shortened_child():
    t = run(FULL, [insert(1, 2, 3, 4, 5, 6), insert(1, 2, 3, 9)])
    child, parent, leaf = node(t, 1, 1, 2, 3, 4, 5, 6), node(t, 2, 1, 2, 3), node(t, 2, 1, 2, 3, 9)
    d = last(t)
    assert d.splits == ((parent, child),) and d.added == tuple(sorted((parent, leaf)))
    assert d.values == {"full": {child: (6, 3)}}
    assert d.kinds(parent) == {"added", "split"} and d.kinds(child) == {"split", "value", "lru"}
    assert d.lru_moves == {"full": {child: (0, 1)}} and d.moved_to_mru == {"full": (leaf, child, parent)}
    assert diff_text(d) == [
        f"#{parent} split from #{child} (child keeps 3 tokens)", f"#{leaf} added under #{parent} (1 token)",
        f"full LRU: #{leaf}, #{child}, #{parent} moved to the MRU end",
        "full pool: available 58 → 57, evictable 6 → 7"]
    back = t.diff(2, 1)  # stepping back over the split undoes it
    assert back.unsplits == ((parent, child),) and back.splits == () and back.removed == d.added
    assert diff_text(back)[0] == f"#{parent} split undone: #{child} has 6 tokens again"


def test_lock_ref_changes():
    t = run(FULL, [insert(1, 2, 3, 4, 5, 6), insert(1, 2, 3, 9), {"op": "match", "key": [1, 2, 3, 4], "as": "m"},
                   {"op": "lock", "match": "m", "as": "l"}])
    parent, child = node(t, 4, 1, 2, 3), node(t, 4, 1, 2, 3, 4)
    d = last(t)
    assert d.locks == {"full": {parent: (0, 1), child: (0, 1)}}
    assert d.kinds(parent) == d.kinds(child) == {"lock_ref"} and not d.added and not d.lru_moves
    assert diff_text(d) == [f"#{parent} full lock_ref 0 → 1", f"#{child} full lock_ref 0 → 1",
                            "full pool: evictable 7 → 3, protected 0 → 4"]


def test_lru_move_reports_the_mover_not_the_nodes_it_passed():
    t = run(FULL, [insert(1, 2), insert(3, 4), insert(5, 6), {"op": "match", "key": [1, 2]}])
    a, b, c = node(t, 4, 1, 2), node(t, 4, 3, 4), node(t, 4, 5, 6)
    d = last(t)
    assert d.lru_moves == {"full": {a: (2, 0)}} and d.moved_to_mru == {"full": (a,)}
    assert d.kinds(a) == {"lru"} and d.kinds(b) == d.kinds(c) == set()  # b and c shifted, they did not move
    assert t.final.node(b).components["full"].lru_rank == 2  # …though their rank changed
    assert diff_text(d) == [f"full LRU: #{a} moved to the MRU end"]
    assert t.diff(4, 5).is_empty  # a match of the same key again reorders nothing
    t2 = run(FULL, [insert(1, 2), insert(3, 4), {"op": "match", "key": [3, 4]}])
    assert last(t2).lru_moves == {} and last(t2).moved_to_mru == {}  # refreshed in place


def test_a_node_whose_record_changed_but_did_not_move_has_no_lru_change():
    t = run(FULL, [insert(1, 2, 3, 4), insert(1, 2, 3, 4, 5, 6), {"op": "evict", "full": 2}])
    a = node(t, 3, 1, 2, 3, 4)  # becomes a leaf (its record changes) and rank 0 as its child goes
    d = last(t)
    assert a in t.store.deltas[3] and d.kinds(a) == set() and d.lru_moves == {} and d.moved_to_mru == {}


def test_change_rows_show_only_what_changed():
    """Issue 30: the diff view showed each changed node whole, before and after, so an
    LRU-only step read as identical cells. Its rows are now what changed, never equal."""
    t = run(FULL, [insert(1, 2), insert(3, 4), insert(5, 6), {"op": "match", "key": [1, 2]}])
    a = node(t, 4, 1, 2)
    assert change_rows(last(t)) == (ChangeRow(a, "full LRU rank", "r2", "r0"),)
    t = run(FULL, [insert(1, 2, 3, 4, 5, 6), insert(1, 2, 3, 9)])
    child, parent, leaf = node(t, 1, 1, 2, 3, 4, 5, 6), node(t, 2, 1, 2, 3), node(t, 2, 1, 2, 3, 9)
    assert change_rows(last(t)) == (
        ChangeRow(child, "key", "[1 2 3 4 5 6] (6 tokens)", "[4 5 6] (3 tokens)"), ChangeRow(child, "parent", "#0", f"#{parent}"),
        ChangeRow(child, "full value", "6", "3"), ChangeRow(child, "full LRU rank", "r0", "r1"),
        ChangeRow(parent, "added", None, "[1 2 3] (3 tokens)"), ChangeRow(leaf, "added", None, "[9] (1 token)"))
    t = run(FULL, [insert(1, 2, 3, 4), {"op": "match", "key": [1, 2, 3, 4], "as": "m"},
                   {"op": "lock", "match": "m", "as": "l"}, {"op": "evict", "full": 100}])
    n = node(t, 1, 1, 2, 3, 4)
    assert change_rows(t.diff(2, 3)) == (ChangeRow(n, "full lock_ref", "0", "1"),)
    assert change_rows(t.diff(0, 1)) == (ChangeRow(n, "added", None, "[1 2 3 4] (4 tokens)"),)
    assert change_rows(t.diff(1, 0)) == (ChangeRow(n, "removed", "[1 2 3 4] (4 tokens)", None),)


@pytest.mark.parametrize("path", ["tour.toml", "tour_swa.toml", "tour_mamba.toml", "tour_hicache_hybrid.toml"])
def test_every_changed_node_has_a_change_row_and_no_row_is_unchanged(path):
    t = Runner(load_scenario(ROOT / "scenarios" / path)).run()
    for step in range(1, len(t) + 1):
        rows = change_rows(t.diff(step - 1, step))
        assert all(r.before != r.after for r in rows), (step, rows)
        assert {r.node for r in rows} == set(t.diff(step - 1, step).node_kinds), step


SWA_STEPS = [insert(*range(1, 13)), {"op": "match", "key": [1, 2, 3, 4, 99]}, {"op": "evict", "swa": 4},
             insert(*range(1, 13))]


def test_swa_tombstoned_then_recovered():
    t = run(SWA, SWA_STEPS)
    n = node(t, 3, 1, 2, 3, 4, 5, 6, 7, 8)
    d = t.diff(2, 3)
    assert d.tombstoned == {"swa": (n,)} and d.recovered == {} and d.kinds(n) == {"tombstoned", "lru"}
    assert d.lru_moves == {"swa": {n: (2, None)}}  # it left the SWA LRU list
    assert diff_text(d) == [f"#{n} swa tombstoned", "swa pool: available 12 → 16, evictable 12 → 8"]
    d = t.diff(3, 4)
    assert d.recovered == {"swa": (n,)} and d.tombstoned == {} and "recovered" in d.kinds(n)
    assert d.lru_moves["swa"][n] == (None, 1)
    assert f"#{n} swa recovered (4 tokens)" in diff_text(d)


def test_mamba_tombstoned_then_recovered():
    t = run(MAMBA, [insert(1, 2, 3, 4, 5, 6), insert(*range(1, 11)), {"op": "evict", "mamba": 1},
                    insert(1, 2, 3, 4, 5, 6)])
    n = node(t, 4, 1, 2, 3, 4, 5, 6)
    d = t.diff(2, 3)
    assert d.tombstoned == {"mamba": (n,)} and d.lru_moves == {"mamba": {n: (1, None)}} and not d.removed
    assert diff_text(d) == [f"#{n} mamba tombstoned", "mamba pool: available 4 → 5, evictable 2 → 1"]
    d = t.diff(3, 4)
    assert d.recovered == {"mamba": (n,)} and d.kinds(n) == {"recovered", "lru"}
    assert diff_text(d)[0] == f"#{n} mamba recovered (1 state slot)"


def test_requests_started_and_finished():
    t = run(FULL, [insert(1, 2, 3, 4), {"op": "req_prefill", "req": "r1", "tokens": [1, 2, 3, 4, 5, 6]},
                   {"op": "req_finish", "req": "r1"}])
    n, leaf = node(t, 3, 1, 2, 3, 4), node(t, 3, 1, 2, 3, 4, 5, 6)
    d = t.diff(1, 2)
    assert (d.requests_started, d.requests_finished) == (("r1",), ()) and d.locks == {"full": {n: (0, 1)}}
    assert diff_text(d) == [f"#{n} full lock_ref 0 → 1",
                            "full pool: available 60 → 58, evictable 4 → 0, protected 0 → 4, held 0 → 2",
                            "request r1 started"]
    d = t.diff(2, 3)
    assert (d.requests_started, d.requests_finished) == ((), ("r1",)) and d.added == (leaf,)
    assert d.pools["full"].counters == {"evictable": (0, 6), "protected": (4, 0), "held": (2, 0)}
    assert diff_text(d)[-1] == "request r1 finished"


# ---- against whole states -----------------------------------------------------------------


def random_steps(seed: int, n: int = 60) -> list[dict]:
    """A wide tree (so order derivation, not a re-sort, serves most diffs) then random ops."""
    rng = random.Random(seed)
    steps = [insert(i, rng.randint(1, 3), rng.randint(1, 3)) for i in range(1, 41)]
    for i in range(n):
        kind = rng.choice(["insert", "match", "match", "evict", "prefill", "finish"])
        key = [rng.randint(1, 40)] + [rng.randint(1, 3) for _ in range(rng.randint(0, 6))]
        if kind == "insert":
            steps.append(insert(*key))
        elif kind == "match":
            steps.append({"op": "match", "key": key})
        elif kind == "evict":
            steps.append({"op": "evict", **{c: rng.randint(1, 6) for c in ("full", "swa")}})
        elif kind == "prefill":
            steps.append({"op": "req_prefill", "req": f"r{i}", "tokens": key})
        elif kind == "finish":
            live = [s["req"] for s in steps if s["op"] == "req_prefill"]
            done = {s["req"] for s in steps if s["op"] == "req_finish"}
            if set(live) - done:
                steps.append({"op": "req_finish", "req": sorted(set(live) - done)[0]})
    return steps


def expected_from_snapshots(t, a: int, b: int) -> dict:
    """What comparing the two whole states gives: the slow, obvious diff."""
    old, new = t.state_after(a).to_snapshot(), t.state_after(b).to_snapshot()
    nb, na = {n.id: n for n in old.nodes}, {n.id: n for n in new.nodes}
    out = {"added": tuple(sorted(na.keys() - nb.keys())), "removed": tuple(sorted(nb.keys() - na.keys())),
           "tombstoned": {}, "recovered": {}, "locks": {}, "values": {}, "ranks": {}}
    for i in sorted(na.keys() & nb.keys()):
        for name in old.components:
            cb, ca = nb[i].components[name], na[i].components[name]
            if cb.tombstone != ca.tombstone:
                out["tombstoned" if ca.tombstone else "recovered"].setdefault(name, []).append(i)
            elif cb.value_len != ca.value_len:
                out["values"].setdefault(name, {})[i] = (cb.value_len, ca.value_len)
            if cb.lock_ref != ca.lock_ref:
                out["locks"].setdefault(name, {})[i] = (cb.lock_ref, ca.lock_ref)
            out["ranks"][name, i] = (cb.lru_rank, ca.lru_rank)
    for kind in ("tombstoned", "recovered"):
        out[kind] = {k: tuple(v) for k, v in out[kind].items()}
    return out


@pytest.mark.parametrize("seed", range(4))
def test_diff_equals_comparing_whole_states(seed):
    t = run(WIDE_SWA, random_steps(seed), all_succeed=False)  # a random op may be refused
    rng = random.Random(seed)
    pairs = [(i, i + 1) for i in range(len(t))] + [(i + 1, i) for i in range(len(t))]
    pairs += [tuple(rng.sample(range(len(t) + 1), 2)) for _ in range(30)] + [(0, len(t)), (len(t), 0)]
    for a, b in pairs:
        d, want = t.diff(a, b), expected_from_snapshots(t, a, b)
        assert (d.added, d.removed) == (want["added"], want["removed"]), (a, b)
        assert (d.tombstoned, d.recovered, d.locks, d.values) == \
            (want["tombstoned"], want["recovered"], want["locks"], want["values"]), (a, b)
        for name, moves in d.lru_moves.items():  # every reported rank is the state's own rank
            for i, ranks in moves.items():
                assert want["ranks"][name, i] == ranks, (a, b, name, i)


@pytest.mark.parametrize("path", ["tour.toml", "tour_swa.toml", "tour_mamba.toml"])
def test_reverse_diff_and_empty_diff(path):
    t = Runner(load_scenario(ROOT / "scenarios" / path)).run()
    n = len(t)
    for a, b in [(i, i + 1) for i in range(n)] + [(0, n), (2, n - 2), (1, n // 2)]:
        d, r = t.diff(a, b), t.diff(b, a)
        assert (r.added, r.removed, r.splits, r.unsplits) == (d.removed, d.added, d.unsplits, d.splits)
        assert (r.tombstoned, r.recovered) == (d.recovered, d.tombstoned)
        assert r.ghosts == {i: d.records_after[i] for i in d.added}
        for mine, theirs in [(r.values, d.values), (r.locks, d.locks), (r.lru_moves, d.lru_moves)]:
            assert mine == {c: {i: (y, x) for i, (x, y) in m.items()} for c, m in theirs.items()}
        swapped = {k: (p.after, p.before) for k, p in r.pools.items()}
        assert swapped == {k: (p.before, p.after) for k, p in d.pools.items()}
        assert (r.requests_started, r.requests_finished) == (d.requests_finished, d.requests_started)
        assert dict(r.node_kinds).keys() == dict(d.node_kinds).keys()
    for i in range(n + 1):
        assert t.diff(i, i).is_empty and diff_text(t.diff(i, i)) == []
    assert not t.diff(0, n // 2).is_empty


def test_a_diff_builds_no_whole_tree_view(monkeypatch):
    """It reads the changed nodes' records only: children, paths, the derived LRU
    table and snapshots are never built (each would cost the whole tree)."""
    t = run(WIDE_SWA, random_steps(7, n=20), all_succeed=False)

    def refuse(*args):
        raise AssertionError("a whole-tree view was built")

    for name in ("children", "path", "to_snapshot", "node"):
        monkeypatch.setattr(TimelineState, name, refuse)
    monkeypatch.setattr(TimelineState, "lru", property(refuse))
    for i in range(len(t)):
        diff_text(t.diff(i, i + 1))


class StoreTimeline:
    """Just what ``diff_states`` reads of a timeline, over a hand-extended store."""

    def __init__(self, store):
        self.store = store

    def __len__(self):
        return len(self.store)

    def state_after(self, index):
        return self.store.state(index)


def relabel_step(store, scale: int, to_top=None) -> None:
    """Append a step that renumbers every SWA label (order kept), optionally then moving one node to the top."""
    def with_label(r, label):
        swa = r.components[1]._replace(lru_label=label)
        return r._replace(components=(r.components[0], swa))

    listed = {i: r for i, r in store.current.items() if r.components[1].lru_label is not None}
    delta = {i: with_label(r, r.components[1].lru_label * scale) for i, r in listed.items()}
    if to_top is not None:
        delta[to_top] = with_label(delta[to_top], max(r.components[1].lru_label for r in delta.values()) + 1)
    g = store.globals[-1]
    store.append(delta, dataclasses.replace(g, lru_relabels=(g.lru_relabels[0], g.lru_relabels[1] + 1)))


def test_lru_relabel_is_no_move_and_a_move_across_it_is_found():
    t = run(SWA, [insert(1, 2, 3, 4), insert(5, 6, 7, 8), insert(9, 10, 11, 12)])
    a, b, c = (node(t, 3, *range(k, k + 4)) for k in (1, 5, 9))  # SWA order c b a
    timeline = StoreTimeline(t.store)
    relabel_step(t.store, 3)
    assert len(t.store.deltas[4]) == 3 and diff_states(timeline, 3, 4).is_empty  # every label moved, no node did
    relabel_step(t.store, 5, to_top=b)
    d = diff_states(timeline, 4, 5)
    assert timeline.state_after(5).lru["swa"] == (b, c, a)
    assert d.lru_moves == {"swa": {b: (1, 0), c: (0, 1)}}  # c was only passed, but labels no longer tell
    assert d.moved_to_mru == {"swa": (b, c)} and d.kinds(a) == set()  # a kept its place
