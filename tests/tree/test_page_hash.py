"""Page hashes (cache/basics/page_hash.py): the per-page content chain SGLang 0.5.23 keys storage
pages and KV events by. The literal digests were printed by SGLang 0.5.23's native
``get_hash_str`` (tokens 1..16, page 4, no prior); the namespace seeds by its
``storage_namespace_seed``."""

from __future__ import annotations

from cache import InsertParams, RadixKey, UnifiedRadixCache
from cache.basics.keys import pack_tokens
from cache.basics.page_hash import as_int64, chain, node_chain, storage_seed

SGLANG_1_TO_16 = ["cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72",
                  "4ebfa8a1f3c341517621838c6e1b9aa350307e3f00b3cbd1a07ef740f54396d6"]


def insert(cache, tokens, **key):
    slots = cache.alloc_kv(len(tokens))
    cache.insert(InsertParams(RadixKey(tokens, **key), slots))


def chains(cache) -> dict[tuple, list[str]]:
    """Every node's (first token, length) -> its page hashes."""
    return {(n.token_ids[0], n.length): n.page_hashes for n in cache.tree.iter_nodes() if n is not cache.tree.root}


def test_the_chain_is_sglangs_and_a_page_hashes_its_whole_prefix():
    assert chain(pack_tokens(range(1, 17)), 4, None)[:2] == SGLANG_1_TO_16
    # the second page hashed alone from the first page's digest is the same page hash
    assert chain(pack_tokens(range(5, 9)), 4, SGLANG_1_TO_16[0]) == [SGLANG_1_TO_16[1]]
    assert chain(pack_tokens(range(1, 7)), 4, None) == SGLANG_1_TO_16[:1]  # a partial page is not hashed
    assert as_int64("ffffffffffffffff" + "0" * 48) == -1 and as_int64(SGLANG_1_TO_16[0]) == 0xcf97adeedb59e05b - 2**64


def test_namespace_seeds_keep_absent_empty_and_joined_parts_apart():
    seeds = [storage_seed(*parts) for parts in [("x", None), (None, "x"), ("", None), ("a", "b"), ("ab", None)]]
    assert storage_seed(None, None) is None and len(set(seeds)) == len(seeds)


def test_nodes_hash_when_asked_and_a_split_only_cuts_the_chain():
    cache = UnifiedRadixCache(kv_size=64, page_size=4, device="cpu")
    insert(cache, list(range(1, 17)))
    assert all(h is None for h in chains(cache).values())  # hashing is off until storage or KV events need it
    cache.tree.enable_page_hashes()  # backfills what was built before
    assert chains(cache) == {(1, 16): chain(pack_tokens(range(1, 17)), 4, None)}
    insert(cache, [*range(1, 9), 99, 98, 97, 96])  # splits at 8
    whole = chain(pack_tokens(range(1, 17)), 4, None)
    assert chains(cache) == {(1, 8): whole[:2], (9, 8): whole[2:],
                             (99, 4): chain(pack_tokens([99, 98, 97, 96]), 4, whole[1])}
    for node in cache.tree.iter_nodes():
        if node is not cache.tree.root:
            assert node.page_hashes == node_chain(node, 4)


def test_a_namespaced_node_seeds_storage_and_event_chains_differently():
    cache = UnifiedRadixCache(kv_size=64, page_size=4, device="cpu")
    cache.tree.enable_page_hashes()
    insert(cache, list(range(1, 9)), extra_key="lora", cache_salt="s")
    insert(cache, list(range(1, 9)), extra_key="other", cache_salt="s")
    nodes = [n for n in cache.tree.iter_nodes() if n is not cache.tree.root]
    assert len(nodes) == 2 and nodes[0].page_hashes != nodes[1].page_hashes  # storage: extra_key seeds
    assert nodes[0].event_hashes == nodes[1].event_hashes  # events: the salt alone, as SGLang's legacy seed
    assert nodes[0].event_hashes != chain(pack_tokens(range(1, 9)), 4, None)
