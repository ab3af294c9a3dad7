"""Lock refs are accounted for by held receipts; misuse of a receipt changes nothing."""

from __future__ import annotations

import pytest

from cache import InsertParams, RadixKey, UnifiedRadixCache, check_invariants
from cache.basics.errors import LockError


def swa_cache() -> UnifiedRadixCache:
    cache = UnifiedRadixCache(components=("full", "swa"), kv_size=64, sliding_window=4, device="cpu")
    tokens = list(range(1, 9))
    slots = cache.alloc_kv(len(tokens))
    cache.write_kv(slots, tokens)
    cache.insert(InsertParams(RadixKey(tokens), slots))
    return cache


def test_skip_swa_on_a_lock_whose_window_is_still_held_is_refused():
    cache = swa_cache()
    m = cache.match_prefix(RadixKey(list(range(1, 9))))
    receipt = cache.inc_lock_ref(m.last_device_node)
    before = cache.snapshot()
    with pytest.raises(LockError, match="release_window first"):
        cache.dec_lock_ref(m.last_device_node, receipt, skip_swa=True)
    assert cache.snapshot() == before and check_invariants(cache) == []
    cache.release_window(m.last_device_node, receipt)
    cache.dec_lock_ref(m.last_device_node, receipt, skip_swa=True)  # now consistent
    assert cache.protected_size("full") == cache.protected_size("swa") == 0
    assert check_invariants(cache) == []


@pytest.mark.parametrize("skip", [("full",), ("SWA",), ("mamba",)])
def test_skip_names_must_be_auxiliary_components_of_this_cache(skip):
    cache = swa_cache()
    m = cache.match_prefix(RadixKey(list(range(1, 9))))
    before = cache.snapshot()
    with pytest.raises(LockError, match="cannot skip"):
        cache.inc_lock_ref(m.last_device_node, skip)
    assert cache.snapshot() == before


def test_a_lock_no_receipt_accounts_for_is_named():
    cache = swa_cache()
    m = cache.match_prefix(RadixKey(list(range(1, 9))))
    receipt = cache.inc_lock_ref(m.last_device_node)
    assert check_invariants(cache) == []
    node = cache.tree.nodes[m.last_device_node]
    node.data[1].lock_ref += 1  # a leaked SWA lock (what a skipped release leaves behind)
    names = {v.name for v in check_invariants(cache)}
    assert "lock.unaccounted" in names
    node.data[1].lock_ref -= 1
    cache.dec_lock_ref(m.last_device_node, receipt)
    assert check_invariants(cache) == []


def test_a_lock_at_the_root_takes_nothing_and_is_released_once():
    cache = UnifiedRadixCache(components=("full", "swa", "mamba"), kv_size=64, sliding_window=4, mamba_size=4,
                              device="cpu")
    miss = cache.match_prefix(RadixKey([7, 8, 9]))
    root = cache.tree.root
    assert miss.last_device_node == root.id
    before = cache.snapshot()
    receipt = cache.inc_lock_ref(root.id)
    assert receipt.delta == 0 and receipt.component_lock_uuids == {}
    assert [cd.lock_ref for cd in root.data] == [1, 1, 1]  # the root's own fixed lock, no more
    assert cache.protected_size("full") == cache.protected_size("swa") == 0
    assert check_invariants(cache) == []
    cache.release_window(root.id, receipt)  # the window part too: nothing to let go
    cache.dec_lock_ref(root.id, receipt)
    assert cache.snapshot().nodes == before.nodes and check_invariants(cache) == []
    with pytest.raises(LockError, match="not held"):
        cache.dec_lock_ref(root.id, receipt)
