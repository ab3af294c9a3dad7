"""The bare-tree floor: a benchmark baseline, not a cache.

A radix tree as plain as Python allows — a dict of children per node, keyed by the
first token's 4 bytes, edges as bytes compared with ``startswith`` — with no
components, values, locks, LRU, events, checks or torch. Replaying a trace's match
and insert steps on it (the caller's path: the key packed from the step's list, then
the call) shows what any Python radix tree over packed keys must pay, so the real
cache's figures can be read against it (``urc bench --trace`` reports both). It
shares only the split-point search over packed bytes with the cache (cache.basics.keys).
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Iterable

from cache.basics.keys import TOKEN_BYTES, common_prefix_tokens

from .synthetic import stats


class BareNode:
    __slots__ = ("children", "key")

    def __init__(self, key: bytes) -> None:
        self.children: dict[bytes, BareNode] = {}
        self.key = key


class BareTree:
    def __init__(self) -> None:
        self.root = BareNode(b"")

    def _walk(self, data: bytes) -> tuple[BareNode, int]:
        """Down the tree along ``data``, splitting a partly matched edge; returns the
        deepest node and the bytes matched."""
        node, off, end = self.root, 0, len(data)
        while off < end:
            child = node.children.get(data[off : off + TOKEN_BYTES])
            if child is None:
                break
            edge = child.key
            if data.startswith(edge, off):
                node, off = child, off + len(edge)
                continue
            cut = common_prefix_tokens(data, off, edge) * TOKEN_BYTES
            upper = BareNode(edge[:cut])
            child.key = edge[cut:]
            upper.children[child.key[:TOKEN_BYTES]] = child
            node.children[edge[:TOKEN_BYTES]] = upper
            return upper, off + cut
        return node, off

    def match(self, data: bytes) -> int:
        return self._walk(data)[1] // TOKEN_BYTES

    def insert(self, data: bytes) -> int:
        node, off = self._walk(data)
        if off < len(data):
            node.children[data[off : off + TOKEN_BYTES]] = BareNode(data[off:])
        return off // TOKEN_BYTES


def floor_timed(steps: Iterable[tuple[str, dict]]) -> dict:
    """The match and insert steps among ``(op, fields)`` on a ``BareTree``, caller's
    path, in µs (extra_key namespaces and page sizes ignored: page 1, one namespace)."""
    tree = BareTree()
    samples: dict[str, list[int]] = {"match": [], "insert": []}
    clock = time.perf_counter_ns
    for op, fields in steps:
        if op in samples:
            start = clock()
            data = array("I", fields["key"]).tobytes()
            getattr(tree, op)(data)
            samples[op].append(clock() - start)
    return {op: stats(ns) for op, ns in samples.items() if ns}
