"""The anchor lock: a component whose lock holds one node only, the match's anchor.

Mamba's state (or any data held by one node) is locked where the match ended: unlike
Full's path lock no ancestor is touched, and the root is never locked. Mixed into such
a component beside ``TreeComponent``, whose counters it moves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from ..observe.events import Cause, EventKind

if TYPE_CHECKING:
    from ..tree.node import TreeNode


class AnchorLockMixin:
    """A lock on one node only, the match's anchor."""

    def acquire_lock(self, node: TreeNode, receipt) -> None:
        if node is self.tree.root:
            return
        cd = node.data[self.index]
        if cd.lock_ref == 0 and cd.value is not None:  # its value becomes protected
            self._move_to_protected(node)
        cd.lock_ref += 1
        if self.tree.events.enabled:  # (the detail is built only for a listener)
            self._emit(EventKind.LOCK, node, Cause.REQUEST, self.value_len(node), f"lock_ref={cd.lock_ref}")

    def locked_nodes(self, node: TreeNode, receipt) -> list:
        return [] if node is self.tree.root else [node]

    def check_release(self, node: TreeNode, receipt) -> Optional[str]:
        if node is not self.tree.root and node.data[self.index].lock_ref <= 0:
            return f"{self.name} release hit lock_ref=0 on node {node.id}"
        return None

    def release_lock(self, node: TreeNode, receipt) -> None:
        if node is self.tree.root:
            return
        cd = node.data[self.index]
        if cd.lock_ref == 1 and cd.value is not None:  # its value becomes evictable again
            self._move_to_evictable(node)
        cd.lock_ref -= 1
        if self.tree.events.enabled:  # (the leaf set is the tree's: dec_lock_ref updates it after every release)
            self._emit(EventKind.UNLOCK, node, Cause.REQUEST, self.value_len(node), f"lock_ref={cd.lock_ref}")
