"""The session-partitioned LRU list (v0.5.23's UnifiedLRUList with ``is_referenced``).

With the session radix cache on, an auxiliary component's LRU keeps the nodes a
session references (their ``session_ref`` > 0) on the MRU side of a ``mid`` sentinel
and the rest behind it, so a walk from the tail meets every unreferenced node first.
A node changes side only when something re-files it (an access, or its session_ref
crossing 0). Eviction walks with a ``cursor`` sentinel that sits just above the next
candidate, so it survives the removal of the node it stood on; both sentinels count
as locked, which makes walks step over them (past ``mid`` into referenced nodes).

Order labels (see lru.py) stay consistent with the order: the unreferenced side takes
labels from ``mid``'s counter, the referenced side from the head's, which starts at
``REFERENCED_BASE``, far above anything the other side reaches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Optional

from .lru import LRUList
from .node import TreeNode

REFERENCED_BASE = 1 << 96


class _Locked:
    __slots__ = ("lock_ref", "host_lock_ref")

    def __init__(self) -> None:
        self.lock_ref = 1
        self.host_lock_ref = 1


class _Marker:
    """A sentinel inside the list: walks that skip locked members step over it."""

    __slots__ = ("lru_prev", "lru_next", "lru_label", "id", "data", "name")

    def __init__(self, slots: int, name: str) -> None:
        self.lru_prev: list = [None] * slots
        self.lru_next: list = [None] * slots
        self.lru_label: list = [0] * slots
        self.id = -1
        self.data = [_Locked() for _ in range(slots)]
        self.name = name


class PartitionedLRUList(LRUList):
    partitioned = True

    def __init__(self, slot: int, num_slots: int, is_referenced: Callable[[TreeNode], bool]) -> None:
        super().__init__(slot, num_slots)
        self.is_referenced = is_referenced
        self.head.lru_label[slot] = REFERENCED_BASE
        self.mid = _Marker(num_slots, "mid")
        self.cursor = _Marker(num_slots, "cursor")
        self._link(self.head, self.mid)

    def _is_marker(self, node) -> bool:
        return node is self.mid or node is self.cursor

    # ---- labels -------------------------------------------------------------
    def _link_after(self, anchor, node: TreeNode) -> None:
        if anchor is self.mid:  # the unreferenced side's MRU end: mid hands out its labels
            self._link(anchor, node)
            self._label_on_top(self.mid, node)
            return
        super()._link_after(anchor, node)

    def _below(self, node: TreeNode):
        below = node.lru_next[self.slot]
        return below.lru_next[self.slot] if below is self.cursor else below  # the cursor has no label of its own

    def _relabel_entry(self, entry, label: int) -> int:
        """``mid`` keeps the unreferenced side's top and the referenced side starts again
        from ``REFERENCED_BASE``; the cursor has no label of its own."""
        if entry is self.mid:
            entry.lru_label[self.slot] = label
            return REFERENCED_BASE
        if entry is self.cursor:
            return label
        return super()._relabel_entry(entry, label)

    # ---- filing by partition --------------------------------------------------
    def _file(self, node: TreeNode) -> None:
        self._link_after(self.head if self.is_referenced(node) else self.mid, node)

    def insert_mru(self, node: TreeNode) -> None:
        assert node.lru_prev[self.slot] is None, f"node {node.id} already in LRU"
        self._file(node)
        self.size += 1

    def insert_after(self, anchor: TreeNode, node: TreeNode) -> None:
        """Beside ``anchor`` (a split keeps the prefix next to its suffix) when both
        belong on the same side; else at the MRU end of ``node``'s own side."""
        assert node.lru_prev[self.slot] is None, f"node {node.id} already in LRU"
        if self.is_referenced(anchor) == self.is_referenced(node):
            self._link_after(anchor, node)
        else:
            self._file(node)
        self.size += 1

    def promote(self, node: TreeNode) -> None:
        """To the MRU end of its side (v0.5.23's reset_node_mru)."""
        assert node.lru_prev[self.slot] is not None, f"node {node.id} not in LRU"
        self._unlink_member(node)
        self._file(node)

    def promote_path(
        self, node: TreeNode, root: TreeNode, include: Callable[[TreeNode], bool], window: Optional[int] = None
    ) -> None:
        """``node`` and its ancestors to the MRU end of their sides, deepest first on
        each side (v0.5.23's reset_node_and_parents_mru / ..._window_ancestors_mru)."""
        s = self.slot
        anchors = {True: self.head, False: self.mid}
        moved: dict[bool, list] = {True: [], False: []}
        seen = 0
        while node is not root and node is not None:
            if window is not None and seen >= window:
                break
            if include(node):
                assert node.lru_prev[s] is not None, f"node {node.id} not in LRU"
                side = bool(self.is_referenced(node))
                anchor = anchors[side]
                if anchor.lru_next[s] is not node:
                    self._unlink_member(node)
                    self._link(anchor, node)
                anchors[side] = node
                moved[side].append(node)
            seen += node.length
            node = node.parent
        for side, top_owner in ((True, self.head), (False, self.mid)):
            block = moved[side]
            if block:  # label the moved block top-down from its side's counter
                self._label_block_on_top(top_owner, block)

    # ---- walks ----------------------------------------------------------------
    def prev_of(self, node, skip_locked: bool = True) -> Optional[TreeNode]:
        s = self.slot
        cur = node.lru_prev[s]
        while cur is not self.head:
            if not self._is_marker(cur) and (not skip_locked or cur.data[s].lock_ref == 0):
                return cur
            cur = cur.lru_prev[s]
        return None

    def cursor_begin(self) -> None:
        """Place the walk cursor at the LRU end."""
        if self.cursor.lru_prev[self.slot] is not None:
            self._unlink_member(self.cursor)
        self._link(self.tail.lru_prev[self.slot], self.cursor)

    def cursor_next(self, skip_locked: bool = True) -> Optional[TreeNode]:
        """The next member above the cursor (across ``mid``), unlocked unless told not to
        look; the cursor moves just above it. None (cursor unmoved) at the MRU end."""
        s = self.slot
        x = self.cursor.lru_prev[s]
        while x is not self.head:
            if x is not self.mid and (not skip_locked or x.data[s].lock_ref == 0):
                break
            x = x.lru_prev[s]
        if x is self.head:
            return None
        self._unlink_member(self.cursor)
        self._link(x.lru_prev[s], self.cursor)
        return x

    def cursor_end(self) -> None:
        s = self.slot
        if self.cursor.lru_prev[s] is not None:
            self._unlink_member(self.cursor)
            self.cursor.lru_prev[s] = self.cursor.lru_next[s] = None

    def referenced_count(self) -> int:
        """Members on the referenced side (above ``mid``)."""
        return sum(1 for entry in self._entries(self.mid) if entry is not self.cursor)

    def __iter__(self) -> Iterator[TreeNode]:
        return (entry for entry in self._entries() if not self._is_marker(entry))
