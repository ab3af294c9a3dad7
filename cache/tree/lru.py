"""An intrusive doubly linked LRU list: O(1) insert, remove and promote.

The links live on the nodes (``node.lru_prev[slot]``), one slot per component, so a
node sits in every component's list at once without extra allocation. Head side is
most recently used.

Each member also carries an order label (``node.lru_label[slot]``, higher = more
recent) so that a snapshot can record a node's place in the order without recording
every other node's: the workbench's timeline stores only what a step changed, and
ranks follow from sorting labels. Labels are spaced ``LABEL_GAP`` apart; a node placed
between two neighbours takes the midpoint, and when no integer is left there the whole
list is relabelled (``relabels`` counts it, so readers know every label moved).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Optional

from .node import TreeNode


LABEL_GAP = 1 << 32


class _Sentinel:
    __slots__ = ("lru_prev", "lru_next", "lru_label", "id")

    def __init__(self, slots: int, label: int) -> None:
        self.lru_prev: list = [None] * slots
        self.lru_next: list = [None] * slots
        self.lru_label: list = [label] * slots
        self.id = -1


class LRUList:
    def __init__(self, slot: int, num_slots: int) -> None:
        self.slot = slot
        self.head = _Sentinel(num_slots, 0)  # MRU end; its label is the newest one handed out
        self.tail = _Sentinel(num_slots, 0)  # LRU end
        self.head.lru_next[slot] = self.tail
        self.tail.lru_prev[slot] = self.head
        self.size = 0
        self.relabels = 0

    def __len__(self) -> int:
        return self.size

    def __contains__(self, node: Optional[TreeNode]) -> bool:
        return node is not None and node.lru_prev[self.slot] is not None

    def _link(self, anchor, node: TreeNode) -> None:
        s = self.slot
        nxt = anchor.lru_next[s]
        node.lru_prev[s] = anchor
        node.lru_next[s] = nxt
        anchor.lru_next[s] = node
        nxt.lru_prev[s] = node

    def _link_after(self, anchor, node: TreeNode) -> None:
        """Link and label: the head hands out a fresh top label, elsewhere the midpoint."""
        self._link(anchor, node)
        s = self.slot
        if anchor is self.head:
            self._label_on_top(self.head, node)
            return
        low, high = self._below(node).lru_label[s], anchor.lru_label[s]
        mid = (low + high) // 2
        if low < mid < high:
            node.lru_label[s] = mid
        else:
            self._relabel()

    def _label_on_top(self, owner, node) -> None:
        """``node`` takes a fresh label from ``owner``'s counter: the top of its side."""
        s = self.slot
        owner.lru_label[s] += LABEL_GAP
        node.lru_label[s] = owner.lru_label[s]

    def _label_block_on_top(self, owner, block: list) -> None:
        """Label a block just moved to the top of ``owner``'s side, first member highest."""
        s = self.slot
        top = owner.lru_label[s] + LABEL_GAP * len(block)
        owner.lru_label[s] = top
        for node in block:
            node.lru_label[s] = top
            top -= LABEL_GAP

    def _below(self, node: TreeNode):
        """The labelled entry on ``node``'s LRU side (a subclass may skip a marker)."""
        return node.lru_next[self.slot]

    def _relabel(self) -> None:
        """Spread every member's label out again (rare: a gap ran out of integers)."""
        s = self.slot
        label = 0
        cur = self.tail.lru_prev[s]
        while cur is not self.head:
            label = self._relabel_entry(cur, label)
            cur = cur.lru_prev[s]
        self.head.lru_label[s] = label
        self.relabels += 1

    def _relabel_entry(self, entry, label: int) -> int:
        """Label ``entry`` (the walk goes up from the LRU end) one gap above ``label``,
        the label below it; returns the label the next one up is placed above."""
        label += LABEL_GAP
        entry.lru_label[self.slot] = label
        return label

    def _unlink_member(self, node) -> None:
        """Join ``node``'s neighbours (its own links stay: a marker is re-linked at once)."""
        s = self.slot
        prev, nxt = node.lru_prev[s], node.lru_next[s]
        prev.lru_next[s] = nxt
        nxt.lru_prev[s] = prev

    def _unlink(self, node: TreeNode) -> None:
        self._unlink_member(node)
        s = self.slot
        node.lru_prev[s] = node.lru_next[s] = node.lru_label[s] = None

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
        moved = []
        while node is not root and node is not None:
            if window is not None and seen >= window:
                break
            if include(node):
                assert node.lru_prev[s] is not None, f"node {node.id} not in LRU"
                if anchor.lru_next[s] is not node:
                    self._unlink(node)
                    self._link(anchor, node)
                anchor = node
                moved.append(node)
            seen += node.length
            node = node.parent
        if moved:  # the moved block sits on top, deepest first: label it top-down
            self._label_block_on_top(self.head, moved)

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

    def _entries(self, stop=None) -> Iterator:
        """Every linked entry from the MRU end down to ``stop`` (default: the LRU end),
        a subclass's markers included."""
        s = self.slot
        stop = self.tail if stop is None else stop
        cur = self.head.lru_next[s]
        while cur is not stop:
            yield cur
            cur = cur.lru_next[s]

    def __iter__(self) -> Iterator[TreeNode]:
        """Members from MRU to LRU."""
        return self._entries()
