"""Shared by the host-tier tests: an insert as the tests make it, and a cache's nodes as
rows, in the oracle's host_dump order."""

from __future__ import annotations

from cache import InsertParams, RadixKey, check_invariants


def insert(cache, tokens, floor=0):
    """Insert ``tokens`` with fresh slots holding their KV (SWA freed below ``floor``, a
    fresh state when the cache has Mamba, freed if the tree had one); invariants after."""
    slots = cache.alloc_kv(len(tokens))
    cache.write_kv(slots, tokens)
    if floor:
        cache.free_swa(slots[:floor])
    state = cache.alloc_mamba_state(tokens) if "mamba" in cache.by_name else None
    result = cache.insert(InsertParams(RadixKey(tokens), slots, state, swa_evicted_seqlen=floor))
    if state is not None and result.mamba_exist:
        cache.free_mamba_state(state)
    assert check_invariants(cache) == []
    return result


def host_rows(cache, with_length: bool = False) -> list[tuple]:
    """Per node (depth, [length,] first token, then per component device and host
    lengths, None where there is none), sorted like hicache_oracle.py's host_dump."""
    out, root = [], cache.tree.root
    for node in cache.tree.nodes.values():
        if node is root:
            continue
        depth, cur = 0, node
        while cur is not root:
            depth, cur = depth + cur.length, cur.parent
        row = [depth, node.length, node.token_ids[0]] if with_length else [depth, node.token_ids[0]]
        for d in node.data:
            row += [None if d.value is None else d.value.shape[0], None if d.host_value is None else d.host_value.shape[0]]
        out.append(tuple(row))
    return sorted(out, key=lambda r: tuple(-1 if v is None else v for v in r))
