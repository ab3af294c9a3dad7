"""Many locks on one match: the per-step check still names a wrong lock on the node a
step touched, and the work it does for locks (segments walked, locked nodes listed)
does not grow with how many receipts are held; the tree's receipt groups stay equal
to the held receipts filed afresh through locks, window releases and releases."""

from __future__ import annotations

import pytest

from cache import InsertParams, RadixKey, UnifiedRadixCache, check_invariants
from cache.checks.incremental import probe
from cache.tree import locks as tree_core_locks
from cache.tree.locks import group_receipts

KEY = list(range(1, 33))


def hybrid(locks: int) -> tuple[UnifiedRadixCache, int, list]:
    """Full+SWA+Mamba, one 32-token node with a state, ``locks`` locks on its match."""
    cache = UnifiedRadixCache(components=("full", "swa", "mamba"), kv_size=256, sliding_window=8,
                              swa_kv_size=128, mamba_size=16, device="cpu")
    slots = cache.alloc_kv(len(KEY))
    cache.write_kv(slots, KEY)
    cache.insert(InsertParams(RadixKey(KEY), slots, mamba_value=cache.alloc_mamba_state(KEY)))
    anchor = cache.match_prefix(RadixKey(KEY)).last_device_node
    receipts = [cache.inc_lock_ref(anchor) for _ in range(locks)]
    return cache, anchor, receipts


def counted_lock_work(cache, touched) -> tuple[bool, int]:
    """``probe(cache, touched)`` and how many times it asked a component which nodes a
    receipt locks, walked an SWA segment or filed a receipt into a group (patches taken
    off afterwards)."""
    calls = [0]
    patched = [(tree_core_locks, "lock_group_key")]
    original_key = tree_core_locks.lock_group_key

    def counting_key(receipt):
        calls[0] += 1
        return original_key(receipt)

    tree_core_locks.lock_group_key = counting_key
    for component in cache.components:
        for name in ("locked_nodes", "_segment"):
            original = getattr(component, name, None)
            if original is None:
                continue

            def counting(*args, _original=original, **kwargs):
                calls[0] += 1
                return _original(*args, **kwargs)

            setattr(component, name, counting)
            patched.append((component, name))
    try:
        return probe(cache, touched), calls[0]
    finally:
        tree_core_locks.lock_group_key = original_key
        for component, name in patched[1:]:
            delattr(component, name)


def test_the_per_step_check_does_the_same_lock_work_for_ten_and_a_thousand_locks():
    work = []
    for locks in (10, 1000):
        cache, anchor, _ = hybrid(locks)
        cache.tree.held_lock_groups()  # the locks were taken in earlier steps, whose checks filed them
        touched = {anchor, cache.tree.root.id}
        ok, calls = counted_lock_work(cache, touched)
        assert ok and calls > 0
        work.append(calls)
    assert work[0] == work[1]


def test_a_wrong_lock_on_the_touched_node_is_named_with_a_thousand_locks_held():
    for i in range(3):  # Full, SWA, Mamba
        cache, anchor, _ = hybrid(1000)
        touched = {anchor, cache.tree.root.id}
        assert check_invariants(cache, touched=touched) == []
        cache.tree.nodes[anchor].data[i].lock_ref -= 1
        assert not probe(cache, touched)
        assert "lock.unaccounted" in {v.name for v in check_invariants(cache, touched=touched)}


def test_a_lost_window_boundary_is_named_for_every_receipt_of_its_group():
    cache, anchor, receipts = hybrid(50)
    swa = cache.by_name["swa"]
    cache.tree.nodes[anchor].data[swa.index].metadata.pop("uuid")
    report = check_invariants(cache, touched={anchor})
    segment = [v for v in report if v.name == "lock.receipt_segment"]
    assert {v.message.split(":")[0] for v in segment} == {f"receipt {r.receipt_id}" for r in receipts}


def test_a_receipt_is_filed_once_when_the_groups_are_first_read():
    cache, anchor, receipts = hybrid(0)
    filed = []
    original_key = tree_core_locks.lock_group_key
    tree_core_locks.lock_group_key = lambda receipt: filed.append(receipt.receipt_id) or original_key(receipt)
    try:
        taken = [cache.inc_lock_ref(anchor) for _ in range(5)]
        cache.dec_lock_ref(anchor, taken.pop())  # released before any read: never filed
        assert filed == []
        assert sum(map(len, cache.tree.held_lock_groups().values())) == 4
        assert sorted(filed) == [r.receipt_id for r in taken]
        cache.tree.held_lock_groups()
        assert len(filed) == 4
    finally:
        tree_core_locks.lock_group_key = original_key


@pytest.mark.parametrize("how", ["release", "window then release"])
def test_the_receipt_groups_follow_locks_and_releases(how):
    cache, anchor, receipts = hybrid(6)
    tree = cache.tree
    assert len(tree.lock_groups) == 1
    for n, receipt in enumerate(receipts[:4]):
        if how != "release":
            cache.release_window(anchor, receipt)
        if n % 2:
            cache.dec_lock_ref(anchor, receipt, skip_swa=how != "release")
        assert tree.lock_groups == group_receipts(tree.live_receipts.values())
        assert check_invariants(cache, touched={anchor}) == [] and check_invariants(cache) == []
    assert sum(map(len, tree.lock_groups.values())) == len(tree.live_receipts) == 4


def test_a_step_that_only_locks_gets_no_content_reread_and_a_step_that_writes_does(monkeypatch):
    """The runner tells the checker which touched nodes may have new data: none after a
    lock, an unlock or a plain match (their events only move locks and LRU places);
    all of them after an insert or an eviction. A wrong lock is still found on a lock
    step, since the lock checks read every touched node."""
    import workbench.model.timeline.runner as runner
    from workbench.model.scenarios.scenario import scenario_from_records

    seen = []
    real = runner.check_invariants

    def spy(cache, touched=None, data_touched=None):
        seen.append(data_touched)
        return real(cache, touched, data_touched)

    monkeypatch.setattr(runner, "check_invariants", spy)
    header = {"schema": 1, "scenario": {"name": "t"}, "config": {"components": ["full", "swa", "mamba"], "kv_size": 256,
                                                                  "sliding_window": 8, "swa_kv_size": 128, "mamba_size": 16}}
    steps = [{"op": "insert", "key": KEY}, {"op": "match", "key": KEY, "as": "m"}, {"op": "lock", "match": "m", "as": "l"},
             {"op": "unlock", "lock": "l"}, {"op": "evict", "full": 8}]
    timeline = runner.Runner(scenario_from_records(header, steps)).run()
    assert timeline.passed
    assert seen == [None, (), (), (), None]  # the match split nothing: its events are verdicts and LRU moves

    cache, anchor, receipts = hybrid(3)
    cache.tree.nodes[anchor].data[2].lock_ref += 1  # a Mamba lock nobody holds
    names = {v.name for v in check_invariants(cache, touched={anchor}, data_touched=())}
    assert "lock.unaccounted" in names
