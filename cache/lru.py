"""An intrusive doubly linked LRU list: O(1) insert, remove and promote.

The links live on the nodes (``node.lru_prev[slot]``), one slot per component, so a
node sits in every component's list at once without extra allocation. Head side is
most recently used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Optional

from .tree_node import TreeNode


class _Sentinel:
    __slots__ = ("lru_prev", "lru_next", "id")

    def __init__(self, slots: int) -> None:
        self.lru_prev: list = [None] * slots
        self.lru_next: list = [None] * slots
        self.id = -1


class LRUList:
    def __init__(self, slot: int, num_slots: int) -> None:
        self.slot = slot
        self.head = _Sentinel(num_slots)  # MRU end
        self.tail = _Sentinel(num_slots)  # LRU end
        self.head.lru_next[slot] = self.tail
        self.tail.lru_prev[slot] = self.head
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def __contains__(self, node: Optional[TreeNode]) -> bool:
        return node is not None and node.lru_prev[self.slot] is not None

    def _link_after(self, anchor, node: TreeNode) -> None:
        s = self.slot
        nxt = anchor.lru_next[s]
        node.lru_prev[s] = anchor
        node.lru_next[s] = nxt
        anchor.lru_next[s] = node
        nxt.lru_prev[s] = node

    def _unlink(self, node: TreeNode) -> None:
        s = self.slot
        prev, nxt = node.lru_prev[s], node.lru_next[s]
        prev.lru_next[s] = nxt
        nxt.lru_prev[s] = prev
        node.lru_prev[s] = node.lru_next[s] = None

    def insert_mru(self, node: TreeNode) -> None:
        assert node.lru_prev[self.slot] is None, f"node {node.id} already in LRU"
        self._link_after(self.head, node)
        self.size += 1

    def insert_after(self, anchor: TreeNode, node: TreeNode) -> None:
        """Place ``node`` just on the LRU side of ``anchor`` (used by splits)."""
        assert node.lru_prev[self.slot] is None, f"node {node.id} already in LRU"
        self._link_after(anchor, node)
        self.size += 1

    def remove(self, node: TreeNode) -> None:
        assert node.lru_prev[self.slot] is not None, f"node {node.id} not in LRU"
        self._unlink(node)
        self.size -= 1

    def promote(self, node: TreeNode) -> None:
        """Move a member to the MRU end."""
        assert node.lru_prev[self.slot] is not None, f"node {node.id} not in LRU"
        self._unlink(node)
        self._link_after(self.head, node)

    def promote_path(
        self, node: TreeNode, root: TreeNode, include: Callable[[TreeNode], bool], window: Optional[int] = None
    ) -> None:
        """Move ``node`` and its ancestors (root excluded) to the MRU end, deepest first.

        With ``window`` the walk stops once the summed key length of visited nodes
        (included or not) reaches it; the node that crosses it is still refreshed.
        """
        anchor = self.head
        seen = 0
        s = self.slot
        while node is not root and node is not None:
            if window is not None and seen >= window:
                break
            if include(node):
                assert node.lru_prev[s] is not None, f"node {node.id} not in LRU"
                if anchor.lru_next[s] is not node:
                    self._unlink(node)
                    self._link_after(anchor, node)
                anchor = node
            seen += node.length
            node = node.parent

    def lru_first(self, skip_locked: bool = True) -> Optional[TreeNode]:
        """The least recently used member (unlocked for this component, by default)."""
        return self.prev_of(self.tail, skip_locked)

    def prev_of(self, node, skip_locked: bool = True) -> Optional[TreeNode]:
        """The next member toward the MRU end from ``node`` (skipping locked ones)."""
        s = self.slot
        cur = node.lru_prev[s]
        while cur is not self.head:
            if not skip_locked or cur.data[s].lock_ref == 0:
                return cur
            cur = cur.lru_prev[s]
        return None

    def __iter__(self) -> Iterator[TreeNode]:
        """Members from MRU to LRU."""
        s = self.slot
        cur = self.head.lru_next[s]
        while cur is not self.tail:
            yield cur
            cur = cur.lru_next[s]
