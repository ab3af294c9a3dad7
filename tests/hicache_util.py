"""Shared by the host-tier tests: a cache's nodes as rows, in the oracle's host_dump order."""

from __future__ import annotations


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
