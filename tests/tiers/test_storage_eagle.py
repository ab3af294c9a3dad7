"""The storage tier under EAGLE's bigram keys (CacheConfig.is_eagle), as SGLang 0.5.23
runs it: a node's pages are stored under the hashes of their token pairs, a prefetch
asks for the pairs after the match up to the prefix limit (one pair short of the key),
hashed from the anchor's last hash, and the fetched pages land where a load-back finds
them, with every slot's fingerprint checked. The expected hashes are computed here
from hashlib, not from cache/basics/page_hash.py."""

from __future__ import annotations

import hashlib
import struct

import pytest

from cache import EvictParams, InsertParams, RadixKey, UnifiedRadixCache, check_invariants, verify_match

A = list(range(1, 18))  # 17 tokens: 16 pairs, 4 pages of 4


def make(**fields):
    return UnifiedRadixCache(components=["full"], kv_size=64, page_size=4, device="cpu", is_eagle=True, hicache={
        "write_policy": "write_through", "load_back_threshold": 4,
        "storage": {"backend": "memory", "prefetch_threshold": 4}}, **fields)


def checked(cache):
    assert check_invariants(cache) == []
    return cache


def insert(cache, tokens, extra_key=None):
    """What the insert op does: the slot past the pairs goes back to the pool."""
    slots = cache.alloc_kv(len(tokens))
    cache.write_kv(slots, tokens)
    cache.insert(InsertParams(RadixKey(tokens, extra_key), slots))
    kept = (len(tokens) - 1) // 4 * 4
    cache.free_kv([slots[kept:]])
    cache.check_hicache_events()


def forget(cache):
    cache.evict(EvictParams(num_tokens=64))
    cache.evict_host(64)
    assert len(cache.tree.nodes) == 1 and checked(cache)


def pair_hashes(tokens, prior=b""):
    """sha256 chained page by page over (previous token, token) uint32 pairs."""
    out, digest = [], prior
    pairs = list(zip(tokens, tokens[1:]))
    for start in range(0, len(pairs) - len(pairs) % 4, 4):
        words = [t for pair in pairs[start : start + 4] for t in pair]
        digest = hashlib.sha256(digest + struct.pack(f"<{len(words)}I", *words)).digest()
        out.append(digest.hex())
    return out


def test_pages_are_stored_under_their_pairs_hashes():
    cache = make()
    insert(cache, A)
    assert sorted(cache.host.storage.stored_keys()) == sorted(pair_hashes(A))
    plain = hashlib.sha256(struct.pack("<4I", *A[:4])).hexdigest()  # the first page hashed as single tokens
    assert plain not in cache.host.storage.stored_keys() and checked(cache)


def test_a_prefetch_from_the_root_stops_a_pair_short_of_the_key():
    cache = make()
    insert(cache, A)
    forget(cache)
    assert cache.query_storage_hit_length(RadixKey(A)) == 16  # the probe asks every whole page of pairs
    issue = cache.prefetch_from_storage("r1", RadixKey(A))  # 16 pairs, the prefix limit 15: three pages
    assert (issue.issued, issue.tokens) == (True, 12)
    assert cache.check_prefetch_progress("r1") and cache.pop_prefetch_loaded_tokens("r1") == 12 and checked(cache)
    match = cache.match_prefix(RadixKey(A))
    assert (match.device_prefix_len, match.host_hit_length) == (0, 12)


def test_a_prefetch_below_an_anchor_brings_back_the_pairs_after_it_verified():
    cache = make()
    insert(cache, A)
    forget(cache)
    insert(cache, A[:9])  # 8 pairs on the device and the host: the anchor
    key = RadixKey(A + [99])  # 17 pairs: the prefix limit reaches all 16 stored
    assert cache.query_storage_hit_length(key) == 8
    issue = cache.prefetch_from_storage("r1", key)
    assert (issue.issued, issue.tokens) == (True, 8) and checked(cache)
    assert cache.check_prefetch_progress("r1") and cache.pop_prefetch_loaded_tokens("r1") == 8
    fetched = cache.tree.node_by_id(cache.match_prefix(RadixKey(A)).last_host_node)
    assert fetched.page_hashes == pair_hashes(A)[2:]  # chained from the anchor: the hashes stored
    assert cache.load_back(RadixKey(A)).loaded == 8 and checked(cache)
    match = cache.match_prefix(RadixKey(A))
    assert match.device_prefix_len == 16 and verify_match(cache, RadixKey(A), match) == []


def test_a_prefetch_chains_on_from_a_fetched_node():
    cache = make()
    insert(cache, A)
    forget(cache)
    insert(cache, A[:9])
    assert cache.prefetch_from_storage("r1", RadixKey(A)).tokens == 4  # pairs 8-11: the limit cuts the last page
    assert cache.check_prefetch_progress("r1") and cache.pop_prefetch_loaded_tokens("r1") == 4
    assert cache.prefetch_from_storage("r2", RadixKey(A + [99])).tokens == 4  # anchored at the fetched node
    assert cache.check_prefetch_progress("r2") and cache.pop_prefetch_loaded_tokens("r2") == 4 and checked(cache)
    assert cache.match_prefix(RadixKey(A)).host_hit_length == 8
    assert cache.load_back(RadixKey(A)).loaded == 8
    match = cache.match_prefix(RadixKey(A))
    assert match.device_prefix_len == 16 and verify_match(cache, RadixKey(A), match) == [] and checked(cache)


@pytest.mark.parametrize("asked, hit", [("x", 16), (None, 0)])
def test_the_chain_is_seeded_by_the_namespace(asked, hit):
    cache = make()
    insert(cache, A, extra_key="x")
    forget(cache)
    assert cache.query_storage_hit_length(RadixKey(A, asked)) == hit


def test_a_first_token_that_differs_is_a_miss():
    """The first pair holds the key's first token: storage has no page of [0, 2, 3, …]."""
    cache = make()
    insert(cache, A)
    forget(cache)
    assert cache.query_storage_hit_length(RadixKey([0] + A[1:])) == 0
