"""The host tier's eviction: device eviction of a backed-up leaf *demotes* it (its
device data goes, the node stays host-only), and host eviction frees host copies.

Host-only nodes are always below the device ones (only device leaves are demoted, and
a load or an insert brings a path back top-down), so a path is device nodes, then
host-only ones. Full host eviction takes *host leaves* (host-only, unlocked,
childless) whole, in the eviction policy's order; an auxiliary component's host
eviction walks its *host LRU* (nodes whose data is on the host only, in the order
they got there). The freed host slots wait in ``host_frees`` for the controller.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from ..basics.base_component import FULL
from ..observe.events import Cause, EventKind
from ..observe.kv_events import CPU
from .session_refs import can_evict_leaf_atomically

if TYPE_CHECKING:
    from ..observe.eviction_batch import EvictionBatch
    from .node import TreeNode


class TreeHostEviction:
    """Mixed into UnifiedTreeCore beside TreeHostTier, whose state it uses."""

    def demote(self, node: TreeNode, batch: EvictionBatch) -> None:
        """Device eviction of a backed-up leaf: every component's device data goes,
        the node stays host-only with its host copies (auxiliary ones join their host
        LRU)."""
        assert node.in_leaf_set and self.backed_up(node), f"node {node.id} is not a backed-up device leaf"
        present = [c for c in self.components if node.data[c.index].value is not None]
        for component in present:  # all frees first: a peer's free may read the Full value
            n = component.evict_component(node, batch)
            if self.events.enabled:
                kept = "host copy kept" if node.data[component.index].host_value is not None else "no host copy"
                if component.index == 0:
                    self.events.emit(EventKind.DEMOTE, FULL, node.id, batch.cause, n, f"device data freed, {kept}")
                else:
                    self.events.emit(EventKind.CASCADE, component.name, node.id, Cause.CASCADE, n, f"from full; {kept}")
        for component in present:
            self._detach(node, component)
        for component in self.host_components:  # v0.5.23 lists every host-only copy, locked or not
            self.refresh_host_lru(node, component, even_locked=True)
        if self.kv_events.enabled:
            self.kv_events.remove(node)
        self.leaves.discard(node)
        self.update_host_leaf_state(node)
        self.update_leaf_state(node.parent)

    # ---- host eviction -------------------------------------------------------------
    def evict_host(self, num_tokens: int, component: str = FULL) -> int:
        """Free host copies until ``num_tokens`` units of ``component`` are freed (or
        nothing more can go); the slots wait in ``host_frees``. Full: host leaves,
        in the eviction policy's order, whole (an ancestor left host-only and childless is
        a host leaf in turn); write-back first reclaims redundant copies. Auxiliary:
        its host LRU, oldest first; a host leaf goes whole, anything else loses only
        that component's host copy."""
        if component != FULL:
            return self._evict_aux_host(num_tokens, self.by_name[component])
        freed = self._reclaim_duplicates(num_tokens) if self.host_policy == "write_back" else 0
        # one heap per call (not a scan per victim), keyed by the eviction policy (as Full's
        # device walk); a parent that becomes a host leaf joins it
        entry = self.components[0].heap_entry
        heap = [entry(n) for n in self.host_leaves] if freed < num_tokens else []
        heapq.heapify(heap)
        while freed < num_tokens and heap:
            node = heapq.heappop(heap)[-1]
            freed += node.length
            parent = self.evict_host_leaf(node, f"need {num_tokens}")
            if parent in self.host_leaves:
                heapq.heappush(heap, entry(parent))
        return freed

    def evict_host_leaf(self, node: TreeNode, detail: str) -> TreeNode:
        """Remove a host leaf with all its host copies; returns its parent."""
        self.host_leaves.discard(node)
        if self.kv_events.enabled:
            self.kv_events.remove(node, CPU)
        self.drop_host_value(node, self.components[0], Cause.CAPACITY, detail)
        parent = node.parent
        self._remove_from_parent(node, Cause.CAPACITY, "host copy evicted")
        self.update_host_leaf_state(parent)
        return parent

    def _evict_aux_host(self, num: int, component) -> int:
        if self.session_radix_cache:
            return self._evict_aux_host_around_sessions(num, component)
        freed = 0
        while freed < num and (node := self.host_lru_first(component)) is not None:
            freed += component.value_len(node)
            if self.is_host_leaf(node):
                self.evict_host_leaf(node, f"{component.name} host eviction, need {num}")
                continue
            self._drop_aux_host(node, component, num, False)
        return freed

    def _evict_aux_host_around_sessions(self, num: int, component) -> int:
        """v0.5.23's walk with session refs on: a cursor climbs the partitioned host LRU
        (the unreferenced side first); a host leaf goes whole only when no session pins
        a component ranked at or above this one there that this one lacks."""
        lru, freed = self.host_lru[component.name], 0
        lru.cursor_begin()
        try:
            node = lru.cursor_next(skip_locked=False)  # a host lock takes a copy off the list
            while freed < num and node is not None and node in lru:
                freed += component.value_len(node)
                if self.is_host_leaf(node) and can_evict_leaf_atomically(component, node):
                    self.evict_host_leaf(node, f"{component.name} host eviction, need {num}")
                else:
                    self._drop_aux_host(node, component, num, self.is_host_leaf(node))
                node = lru.cursor_next(skip_locked=False)
        finally:
            lru.cursor_end()
        return freed

    def _drop_aux_host(self, node: TreeNode, component, num: int, is_leaf: bool) -> None:
        """Drop ``component``'s host copy on ``node`` and cascade to the host copies ranked
        at or below it (on a host leaf ranks tie); one ranked at or above it internally
        stays while a host lock or a session ref this one lacks holds it."""
        self.drop_host_value(node, component, Cause.CAPACITY, f"need {num}")
        rank, own_ref = component.eviction_priority(is_leaf), node.data[component.index].session_ref
        for other in self.host_components:
            cd = node.data[other.index]
            if other is component or cd.host_value is None or other.eviction_priority(is_leaf) > rank:
                continue
            if other.eviction_priority(False) >= component.eviction_priority(False) and (
                    cd.host_lock_ref or (cd.session_ref > 0 and own_ref == 0)):
                continue
            self.drop_host_value(node, other, Cause.CASCADE, f"from {component.name}")

    def _reclaim_duplicates(self, num_tokens: int) -> int:
        """Write-back under host pressure: drop the Full host copies of nodes back on
        the device, oldest first — sparing device leaves (about to be demoted, they
        need their copy) on a first pass, taking them on a second. The nodes stay, and
        so do their auxiliary host copies (they may be the only ones)."""
        freed = 0
        for spare_leaves in (True, False):
            for node_id, node in list(self.host_duplicates.items()):
                if freed >= num_tokens:
                    return freed
                cd = node.data[0]
                if self.nodes.get(node_id) is not node or cd.value is None or cd.host_value is None:
                    del self.host_duplicates[node_id]  # no longer a duplicate
                    continue
                if (spare_leaves and node.in_leaf_set) or cd.host_lock_ref or "transfer" in cd.metadata:
                    continue
                if self.kv_events.enabled:
                    self.kv_events.remove(node, CPU)
                freed += self.drop_host_value(node, self.components[0], Cause.CAPACITY,
                                              "redundant host copy (the device has it)")
                del self.host_duplicates[node_id]
        return freed

    def drop_host_subtree(self, node: TreeNode) -> bool:
        """Write-back could not back up a device leaf: before it is deleted, its
        host-only descendants go (children first), with their host copies. Declined
        (False, nothing changes: the leaf stays on the device) when the leaf or a
        descendant is locked on either tier or in a transfer, e.g. a host-only node
        below with a store in flight (v0.5.23's ``drop_subtree_no_host``)."""
        def pinned(n: TreeNode) -> bool:
            return "transfer" in n.data[0].metadata or any(cd.lock_ref or cd.host_lock_ref for cd in n.data)

        if pinned(node):
            return False
        stack = list(node.children.values())
        order = []
        while stack:
            child = stack.pop()
            if pinned(child):
                return False
            order.append(child)
            stack.extend(child.children.values())
        for child in reversed(order):  # deepest first: each is childless when it goes
            assert child.data[0].value is None
            self.host_leaves.discard(child)
            if self.kv_events.enabled:
                self.kv_events.remove(child, CPU)
            self._remove_from_parent(child, Cause.CASCADE, f"under #{node.id}, dropped without a host copy")
        return True
