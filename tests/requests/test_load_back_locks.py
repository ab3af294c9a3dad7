"""Load-back's locks as v0.5.23's load_back takes them: host locks first, then a
device lock on the best match itself (host-only as it may be), and only then the
threshold / mem_quota decision; a refusal unlocks. Numbers are SGLang 0.5.23's
(../shared/oracle/hicache_oracle.py), as in the bug scenarios sglang-v0523-hicache-*."""

from __future__ import annotations

import pytest

from cache import CacheError, EvictParams, InsertParams, RadixKey, UnifiedRadixCache, check_invariants


def _insert(cache, tokens):
    value = cache.alloc_kv(len(tokens))
    cache.write_kv(value, tokens)
    params = InsertParams(RadixKey(tokens), value)
    if "mamba" in cache.by_name:
        params.mamba_value = cache.alloc_mamba_state(tokens)
    result = cache.insert(params)
    assert not check_invariants(cache)
    return result


def _node(cache, tokens):
    for node in cache.tree.nodes.values():
        path, cur = [], node
        while cur is not cache.tree.root:
            path[:0] = cur.token_ids
            cur = cur.parent
        if path == tokens:
            return node
    raise AssertionError(f"no node ends at {tokens}")


def _no_locks_below_root(cache):
    root = cache.tree.root
    return all(d.lock_ref == 0 and d.host_lock_ref == 0
               for node in cache.tree.nodes.values() if node is not root for d in node.data)


def _swa_host_cache():
    cache = UnifiedRadixCache(components=("full", "swa"), kv_size=96, sliding_window=4, swa_kv_size=48, device="cpu",
                              hicache={"write_policy": "write_back", "host_kv_size": 49, "host_swa_size": 25})
    _insert(cache, list(range(1, 12)))
    _insert(cache, [20, 21, 22, 23])
    cache.evict(EvictParams(num_tokens=32))
    return cache


def test_refused_load_back_puts_its_window_at_the_host_lru_front():
    cache = _swa_host_cache()
    window = _node(cache, list(range(1, 8)))
    assert next(iter(cache.tree.host_lru["swa"])) is not window
    result = cache.load_back(RadixKey(list(range(1, 8))), mem_quota=0)
    assert result.loaded == 0 and result.host_hit_length == 7
    assert next(iter(cache.tree.host_lru["swa"])) is window  # locked, then unlocked: MRU end
    assert _no_locks_below_root(cache) and not check_invariants(cache)
    assert cache.evict_host(8, "swa") == 8  # [8..11] and [20..23]; the window stays
    assert window.data[1].host_value is not None and len(cache.tree.nodes) == 2


def test_load_back_locks_the_best_match_not_the_device_prefix():
    cache = UnifiedRadixCache(components=("full", "mamba"), kv_size=32, mamba_size=3, device="cpu",
                              hicache={"write_policy": "write_back", "load_back_threshold": 1})
    _insert(cache, [1, 2, 3])
    _insert(cache, [1, 2, 3, 4, 5, 6])
    cache.evict(EvictParams(num_tokens=3))  # [4..6] goes to the host, state too
    _insert(cache, [7, 8, 9])
    prefix, other = _node(cache, [1, 2, 3]), _node(cache, [7, 8, 9])
    result = cache.load_back(RadixKey([1, 2, 3, 4, 5, 6]))
    assert result.loaded == 3
    # the state slot came from the prefix's own state (unlocked), not the leaf [7..9]
    assert prefix.data[1].value is None and other.id in cache.tree.nodes
    assert cache.full_evictable_size() == 9 and cache.available_size("full") == 23
    assert cache.protected_size("full") == 0 and cache.protected_size("mamba") == 0
    assert _no_locks_below_root(cache) and not check_invariants(cache)


def test_failed_load_back_releases_its_lock_on_host_only_nodes():
    cache = UnifiedRadixCache(components=("full",), kv_size=16, device="cpu",
                              hicache={"write_policy": "write_back", "load_back_threshold": 1})
    _insert(cache, list(range(1, 9)))
    cache.evict(EvictParams(num_tokens=8))
    held = cache.new_request(list(range(20, 36)))  # every device slot is a running request's
    host_only = _node(cache, list(range(1, 9)))
    assert cache.load_back(RadixKey(list(range(1, 9)))).loaded == 0  # v0.5.23: False, nothing changed
    assert host_only.data[0].lock_ref == 0 and host_only.data[0].host_lock_ref == 0
    assert cache.protected_size("full") == 0 and not check_invariants(cache)
    cache.release_kv_cache(held, checkpoint=False)
    assert cache.load_back(RadixKey(list(range(1, 9)))).loaded == 8
    assert not check_invariants(cache)


def test_the_public_lock_still_refuses_a_host_only_node():
    cache = UnifiedRadixCache(components=("full",), kv_size=16, device="cpu", hicache={"write_policy": "write_back"})
    _insert(cache, list(range(1, 9)))
    cache.evict(EvictParams(num_tokens=8))
    with pytest.raises(CacheError, match="host-only"):
        cache.inc_lock_ref(_node(cache, list(range(1, 9))).id)
