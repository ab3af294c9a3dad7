"""Full's evictable-leaf set, with a persistent lazy heap for LRU eviction.

SGLang rebuilds a heap over every evictable leaf at the start of each eviction: O(n)
per call. Access times only ever increase, so one persistent heap with lazy
re-validation gives the same order (oldest leaf first) in O(k log n) for k victims.
An entry is stale when its node left the set or was touched since; stale entries are
dropped or re-pushed when they surface.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Optional

from .node import TreeNode


class EvictableLeafSet:
    def __init__(self) -> None:
        self._nodes: set[TreeNode] = set()
        self._heap: list[tuple[float, int, TreeNode]] = []

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, node: TreeNode) -> bool:
        return node.in_leaf_set

    def __iter__(self) -> Iterator[TreeNode]:
        return iter(self._nodes)

    def holds(self, node: TreeNode) -> bool:
        """Membership of the set itself (``in`` reads the node's flag): for the checker."""
        return node in self._nodes

    def add(self, node: TreeNode) -> None:
        if node.in_leaf_set:
            return
        node.in_leaf_set = True
        self._nodes.add(node)
        heapq.heappush(self._heap, (node.last_access_time, node.id, node))
        if len(self._heap) > 4 * len(self._nodes) + 256:
            self._compact()

    def discard(self, node: TreeNode) -> None:
        if node.in_leaf_set:
            node.in_leaf_set = False
            self._nodes.discard(node)

    def clear(self) -> None:
        for node in self._nodes:
            node.in_leaf_set = False
        self._nodes.clear()
        self._heap.clear()

    def peek_oldest(self) -> Optional[TreeNode]:
        """The member with the smallest last_access_time (ties: smallest id)."""
        heap = self._heap
        while heap:
            t, _, node = heap[0]
            if not node.in_leaf_set:
                heapq.heappop(heap)
            elif node.last_access_time != t:
                heapq.heapreplace(heap, (node.last_access_time, node.id, node))
            else:
                return node
        return None

    def _compact(self) -> None:
        self._heap = [(n.last_access_time, n.id, n) for n in self._nodes]
        heapq.heapify(self._heap)
