"""The tree core's eviction: delete a leaf whole, tombstone one component in place,
cascade to the components ranked below, and clean up ancestors left empty.

Every removal is reported with its exact cause: the component whose eviction chose
the node (the trigger) reports ``Cause.CAPACITY`` and what it was asked to free
("need 6"); the other components' data that went with it reports ``Cause.CASCADE``
("from swa"); ancestors removed after their last child report ``Cause.CLEANUP``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..observe.events import Cause, EventKind
from ..observe.eviction_batch import EvictionBatch

if TYPE_CHECKING:
    from .component_api import TreeComponentAPI
    from .node import TreeNode


def need_text(need: int) -> str:
    """The detail of a capacity eviction's own events: what it was asked to free."""
    return f"need {need}" if need else ""


class TreeEviction:
    """Mixed into UnifiedTreeCore; uses its nodes, components, LRU lists and event bus."""

    def new_eviction(self, cause: Cause) -> EvictionBatch:
        """An empty batch over this tree's components (no walk started yet)."""
        return EvictionBatch(self.by_name, cause)

    def delete_leaf(self, node: TreeNode, batch: EvictionBatch) -> None:
        """Evict every component of an evictable leaf and remove it, then clean up
        ancestors that were only kept alive by it. The batch's ``trigger`` names the
        component whose eviction chose the leaf; the rest cascade from it."""
        assert node.in_leaf_set, f"node {node.id} is not an evictable leaf"
        if self.host_policy is not None and self.backed_up(node):
            self.demote(node, batch)  # the host copy keeps the node
            return
        if self.kv_events.enabled:
            self.kv_events.remove(node)
        events = self.events.enabled
        data = node.data
        present = [c for c in self.components if data[c.index].value is not None] if len(data) > 1 else self.components
        trigger = batch.trigger
        for component in present:  # all frees first: SWA's free reads the Full value
            n = component.evict_component(node, batch)
            if events:
                if component.name == trigger:
                    self.events.emit(EventKind.EVICT, trigger, node.id, batch.cause, n, need_text(batch.need))
                else:
                    self.events.emit(EventKind.EVICT, component.name, node.id, Cause.CASCADE, n, f"from {trigger}")
        for component in present:
            self._detach(node, component)
        self._remove_from_parent(node, batch.cause)
        self._delete_tombstone_ancestors(node.parent, node.id, batch)

    def tombstone(self, node: TreeNode, component: TreeComponentAPI, batch: EvictionBatch,
                  cascade: bool = True) -> None:
        """Evict ``component``'s data from a node that stays in the tree, then (by
        default) cascade to the components that rank below it there."""
        n = component.evict_component(node, batch)
        if self.events.enabled:
            self.events.emit(EventKind.TOMBSTONE, component.name, node.id, batch.cause, n, batch.detail or need_text(batch.need))
        self._detach(node, component)
        if cascade:
            self.cascade_evict(node, component, batch)

    def _detach(self, node: TreeNode, component: TreeComponentAPI) -> None:
        node.data[component.index].value = None
        if self._touched is not None:
            self._touched.add(node.id)
        if component.uses_lru:
            lru = self.lru[component.name]
            if node in lru:
                lru.remove(node)

    def _remove_from_parent(self, node: TreeNode, cause: Cause, detail: str = "") -> None:
        if self.session_radix_cache:  # its session markers recede first (v0.5.23's discard_deleted_session_leaf)
            self.session_refs.discard_deleted(node)
        self.leaves.discard(node)
        parent = node.parent
        popped = parent.children.pop(node.child_key)
        assert popped is node, f"parent {parent.id} had {popped.id} where {node.id} was expected"
        del self.nodes[node.id]
        if self._touched is not None:
            self._touched.update((node.id, parent.id))
        if self.events.enabled:
            self.events.emit(EventKind.DELETE, None, node.id, cause, node.length, detail)
        self.update_leaf_state(parent)

    def _delete_tombstone_ancestors(self, cur: TreeNode, child_id: int, batch: EvictionBatch) -> None:
        """Walk up from a deleted leaf: a childless ancestor without Full KV is removed
        (with whatever aux data it still had); Full decides who survives. The first
        ancestor with Full KV stops the walk (its leaf state was already refreshed)."""
        root = self.root
        while cur is not root and not cur.children and cur.data[0].value is None and cur.data[0].host_value is None:
            for cd in cur.data:
                if cd.lock_ref > 0:
                    return
            why = f"after child #{child_id}"
            for component in self.components[1:]:
                if cur.data[component.index].value is not None:
                    n = component.evict_component(cur, batch)
                    if self.events.enabled:
                        self.events.emit(EventKind.EVICT, component.name, cur.id, Cause.CLEANUP, n, why)
                    self._detach(cur, component)
            parent = cur.parent
            self._remove_from_parent(cur, Cause.CLEANUP, why)
            child_id, cur = cur.id, parent

    def cascade_evict(self, node: TreeNode, trigger: TreeComponentAPI, batch: EvictionBatch) -> None:
        """After ``trigger`` lost its data on ``node``, evict every other component whose
        priority there is <= the trigger's. A component whose true (internal) priority is
        at least the trigger's is only here because leaf priorities tie at 0; a lock on
        it is legitimate and spares it, as does a session ref the trigger lacks there.
        A lock on a strictly lower tier is a bug."""
        is_leaf = node.in_leaf_set
        trigger_priority = trigger.eviction_priority(is_leaf)
        for component in self.components:
            if component is trigger or node.data[component.index].value is None:
                continue
            if component.eviction_priority(is_leaf) > trigger_priority:
                continue
            cd = node.data[component.index]
            if component.eviction_priority(False) >= trigger.eviction_priority(False):
                if cd.lock_ref != 0:
                    continue
                # a session's data is not taken along by a trigger no session holds here
                if cd.session_ref > 0 and node.data[trigger.index].session_ref == 0:
                    continue
            assert cd.lock_ref == 0, f"{component.name} locked on node {node.id} below evicting {trigger.name}"
            n = component.evict_component(node, batch)
            if self.events.enabled:
                self.events.emit(EventKind.CASCADE, component.name, node.id, Cause.CASCADE, n, f"from {trigger.name}")
            self._detach(node, component)
        self.update_leaf_state(node)
