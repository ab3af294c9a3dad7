"""EAGLE bigram keys (CacheConfig.is_eagle) and cache_salt, against the real SGLang 0.5.23
answers in ../shared/oracle/examples-ext/eagle_full_p1 and eagle_full_swa_p4 (the literal
numbers below come from their .out.jsonl files)."""

from __future__ import annotations

import pytest

from cache import CacheConfig, EvictParams, InsertParams, RadixKey, UnifiedRadixCache, check_invariants
from workbench.bridge.canonical import from_snapshot


def _cache(**fields) -> UnifiedRadixCache:
    return UnifiedRadixCache(CacheConfig(**fields))


def _insert(cache, tokens, floor=0, **key):
    """What the insert op (and the oracle harness) does: the slot past the pairs goes back."""
    slots = cache.alloc_kv(len(tokens))
    cache.write_kv(slots, tokens)
    if floor:
        cache.free_swa(slots[:floor])
    result = cache.insert(InsertParams(RadixKey(tokens, **key), slots, swa_evicted_seqlen=floor))
    adopted = len(tokens) - (1 if cache.bigram_keys else 0)
    adopted -= adopted % cache.page_size
    if floor > adopted:
        cache.free_kv([slots[adopted:floor]], full_only=True)
        adopted = floor
    cache.free_kv([slots[adopted:]])
    return result


def _nodes(cache):
    return {v.raw_key: (v.tokens, v.components["full"].value_len, v.hit_count) for v in cache.snapshot().nodes[1:]}


def test_eagle_full_p1_as_sglang():
    cache = _cache(components=("full",), kv_size=64, is_eagle=True)
    assert _insert(cache, [1, 2, 3, 4, 5, 6]).prefix_len == 0
    assert cache.available_size() == 64 - 5  # 6 tokens are 5 pairs: one slot back
    assert cache.match_prefix(RadixKey([1, 2, 3, 4, 5, 6])).prefix_len == 5
    assert cache.match_prefix(RadixKey([1, 2, 3, 9])).prefix_len == 2
    assert _insert(cache, [1, 2, 3, 9, 10]).prefix_len == 2
    assert cache.match_prefix(RadixKey([1])).prefix_len == 0  # one token is no pair
    assert cache.match_prefix(RadixKey([1, 2])).prefix_len == 1  # splits [1 2 3] after its first pair
    assert _nodes(cache) == {(1, 2): (1, 1, 2), (2, 3): (1, 1, 2), (3, 4, 5, 6): (3, 3, 1), (3, 9, 10): (2, 2, 1)}
    req = cache.new_request([1, 2, 3, 4, 5, 6, 7], rid="a")
    assert req.cache_protected_len == 5 and cache.available_size() == 55
    cache.release_kv_cache(req)
    assert cache.available_size() == 56  # the 7th token's slot goes with the request
    assert _nodes(cache)[(6, 7)] == (1, 1, 1)
    assert cache.evict(EvictParams(num_tokens=1000)).num_tokens_evicted == 8
    assert cache.available_size() == 64 and check_invariants(cache) == []


def test_eagle_full_swa_p4_as_sglang():
    cache = _cache(components=("full", "swa"), page_size=4, kv_size=128, sliding_window=4, is_eagle=True)
    _insert(cache, list(range(1, 11)))  # 9 pairs: 8 kept
    assert cache.match_prefix(RadixKey(list(range(1, 11)))).prefix_len == 8
    assert cache.match_prefix(RadixKey(list(range(1, 9)))).prefix_len == 4  # 7 pairs: one page
    assert _insert(cache, list(range(1, 17))).prefix_len == 8
    assert _insert(cache, list(range(1, 18)), floor=8).prefix_len == 12
    assert [v.raw_key[0] for v in cache.snapshot().nodes[1:]] == [1, 5, 9, 13]
    req = cache.new_request(list(range(1, 19)), rid="a")
    assert (req.cache_protected_len, cache.available_size(), cache.available_size("swa")) == (16, 108, 108)
    cache.extend_request(req, [30, 31, 32, 33, 34], slide=True)
    assert req.swa_evicted_seqlen == 16 and cache.available_size("swa") == 104
    cache.release_kv_cache(req)
    assert (cache.available_size(), cache.available_size("swa")) == (108, 108)
    last = cache.snapshot().nodes[-1]
    assert last.raw_key == (17, 18, 30, 31, 32) and len(last.path) == 20
    result = cache.evict(EvictParams(num_tokens=1000, swa_num_tokens=1000))
    assert (result.num_tokens_evicted, result.swa_num_tokens_evicted) == (20, 20)
    assert check_invariants(cache) == []


def test_eagle_is_off_with_mamba_as_upstream():
    cache = _cache(components=("full", "mamba"), mamba_size=4, is_eagle=True)
    assert not cache.bigram_keys


def test_bigram_view_lengths_and_slices():
    key = RadixKey([5, 6, 7, 8]).bigram_view()
    assert len(key) == 3 and key.raw_token_ids == [5, 6, 7, 8] and key.bigram_view() is key
    assert key[1:3].raw_token_ids == [6, 7, 8]  # neighbours share their boundary token
    assert len(RadixKey([5]).bigram_view()) == 0 and len(RadixKey([]).bigram_view()) == 0
    assert RadixKey([5, 6, 7]).bigram_view() != RadixKey([9, 6, 7]).bigram_view()


def test_bigrams_differing_only_in_the_first_token_share_nothing():
    cache = _cache(components=("full",), kv_size=64, is_eagle=True)
    _insert(cache, [1, 2, 3, 4])
    assert cache.match_prefix(RadixKey([9, 2, 3, 4])).prefix_len == 0
    assert _insert(cache, [9, 2, 3, 4]).prefix_len == 0
    assert sorted(_nodes(cache)) == [(1, 2, 3, 4), (9, 2, 3, 4)]


def test_the_prompt_split_uses_the_bigram_prompt_key():
    cache = _cache(components=("full",), kv_size=64, is_eagle=True)
    req = cache.new_request([1, 2, 3, 4], rid="a")
    cache.extend_request(req, [5, 6])
    cache.release_kv_cache(req)
    # 6 tokens = 5 pairs cached; the prompt's 3 pairs are their own node
    assert sorted(v.raw_key for v in cache.snapshot().nodes[1:]) == [(1, 2, 3, 4), (4, 5, 6)]


@pytest.mark.parametrize("eagle", [False, True])
def test_a_salt_is_its_own_namespace(eagle):
    cache = _cache(components=("full",), kv_size=64, is_eagle=eagle)
    _insert(cache, [1, 2, 3, 4], cache_salt="a")
    assert cache.match_prefix(RadixKey([1, 2, 3, 4])).prefix_len == 0
    assert cache.match_prefix(RadixKey([1, 2, 3, 4], cache_salt="b")).prefix_len == 0
    assert cache.match_prefix(RadixKey([1, 2, 3, 4], extra_key="x", cache_salt="a")).prefix_len == 0
    assert cache.match_prefix(RadixKey([1, 2, 3, 4], cache_salt="a")).prefix_len == 4 - eagle
    assert RadixKey([1], cache_salt="") == RadixKey([1])  # "" is no salt
    req = cache.new_request([1, 2, 3, 4, 5], rid="r", cache_salt="a")
    assert req.cache_protected_len == 4 - eagle
    cache.release_kv_cache(req)
    salts = {v.cache_salt for v in cache.snapshot().nodes[1:]}
    assert salts == {"a"} and check_invariants(cache) == []


def test_canonical_state_names_nodes_by_raw_tokens_and_salt():
    cache = _cache(components=("full",), kv_size=64, is_eagle=True)
    _insert(cache, [1, 2, 3, 4])
    _insert(cache, [1, 2, 3, 9])
    _insert(cache, [1, 2], cache_salt="s")
    state = from_snapshot(cache.snapshot(), ["full"])
    assert set(state.nodes) == {(None, (1, 2, 3)), (None, (1, 2, 3, 4)), (None, (1, 2, 3, 9)), ((None, "s"), (1, 2))}
    assert state.nodes[(None, (1, 2, 3, 4))].tokens == 1
