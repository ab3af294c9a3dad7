"""Full-attention KV: the backbone component.

Every tree-level notion (a node exists, is a leaf, is evictable) is defined by Full
data. Full eviction takes the evictable leaf the eviction policy puts first (least
recently used by default, evict_policy.py); its lock is a path lock from the node up
to the root.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Optional

import torch

from ...observe.events import Cause, EventKind
from ..base import TreeComponent
from .host import FullHostMixin

if TYPE_CHECKING:
    from ...observe.eviction_batch import EvictionBatch
    from ...basics.params import DecLockRefParams, IncLockRefResult
    from ...tree.node import TreeNode


class FullComponent(FullHostMixin, TreeComponent):
    name = "full"
    leaf_priority = 0
    internal_priority = 2
    session_coverage = "path"  # a session holds its whole path (session_refs.py)
    _walk_heap = None  # a policy's (or the session-aware) walk's heap, while one runs
    passed: frozenset = frozenset()  # a walk's victims kept on the device (pass_by)

    # Full matches every node that has Full KV, i.e. every node (no host tier here),
    # so it needs no validator; it orders eviction by the tree's eviction policy, not an
    # LRU list (the tree core calls the LRU refresh hooks of the other components only).

    def pinned_by_lock(self, path) -> int:
        i = self.index
        return sum(n for node, n in path if node.data[i].lock_ref == 0)

    def redistribute_on_split(self, new_parent: TreeNode, child: TreeNode) -> None:
        i = self.index
        upper, lower = new_parent.data[i], child.data[i]
        upper.lock_ref, upper.host_lock_ref = lower.lock_ref, lower.host_lock_ref
        upper.session_ref = lower.session_ref  # every session covering the suffix covers the prefix
        cut = new_parent.length
        if lower.value is not None:
            value = lower.value
            upper.value = value[:cut]
            lower.value = value[cut:]
        self.split_host_data(upper, lower, cut)

    def evict_component(self, node: TreeNode, batch: EvictionBatch) -> int:
        cd = node.data[self.index]
        if cd.value is None:
            return 0
        n = node.length
        batch.free("full", cd.value, n)
        self.tree.evictable[self.index] -= n
        # value = None is left to the tree core: other components' frees may read it
        return n

    def evict_start(self, request: int) -> None:
        self._evict_request = request
        self.passed = set()
        self._walk_heap = None
        tree = self.tree
        if tree.session_radix_cache or not tree.eviction_policy.plain_lru:  # v0.5.23's heap, built per walk
            self._walk_heap = [self.heap_entry(n) for n in tree.leaves]
            heapq.heapify(self._walk_heap)
            self._last_victim = None

    def walk_key(self, node: TreeNode) -> tuple:
        """The policy's key (evict_policy.py); with session refs, unreferenced leaves
        first, then fewer refs, then the policy's key (v0.5.23's session strategy)."""
        key = self.tree.eviction_policy.key(node)
        if not self.tree.session_radix_cache:
            return (key,)
        ref = node.data[self.index].session_ref
        return ref > 0, ref, key

    def heap_entry(self, node: TreeNode) -> tuple:
        """A heap entry keyed when pushed; ties fall to access time (SGLang's node order)."""
        return self.walk_key(node), node.last_access_time, node.id, node

    def evict_next(self, batch: EvictionBatch) -> tuple[Optional[TreeNode], bool]:
        if self._walk_heap is not None:
            return self._evict_next_from_heap(batch)
        if batch.counts["full"] >= self._evict_request:
            return None, False
        leaf = self.tree.leaves.peek_oldest()  # lru without session refs: the persistent heap's order is the same
        return leaf, leaf is not None

    def _evict_next_from_heap(self, batch: EvictionBatch) -> tuple[Optional[TreeNode], bool]:
        """Pop the heap; the previous victim's parent joins it once it became a leaf
        (keys are taken when pushed, as v0.5.23's heap does)."""
        heap, last = self._walk_heap, self._last_victim
        if last is not None and last.parent is not None and last.parent.in_leaf_set:
            heapq.heappush(heap, self.heap_entry(last.parent))
        self._last_victim = None
        while batch.counts["full"] < self._evict_request and heap:
            node = heapq.heappop(heap)[-1]
            if node.in_leaf_set:
                self._last_victim = node
                return node, True
        return None, False

    def pass_by(self, node: TreeNode) -> None:
        """The leaf set would offer ``node`` again: the rest of the walk runs on a heap
        of the other leaves (the same order), as v0.5.23's heap has popped it."""
        self.passed.add(node)
        if self._walk_heap is None:
            self._walk_heap = [self.heap_entry(n) for n in self.tree.leaves if n not in self.passed]
            heapq.heapify(self._walk_heap)
        self._last_victim = None

    def evict_end(self) -> None:
        self._walk_heap = None
        self._last_victim = None

    def acquire_lock(self, node: TreeNode, receipt: IncLockRefResult) -> None:
        i = self.index
        tree = self.tree
        root = tree.root
        leaves = tree.leaves
        delta = 0
        events = tree.events.enabled
        while node is not root:
            cd = node.data[i]
            if cd.lock_ref == 0 and cd.value is not None:  # a load's host-only bottom: lock only
                delta += node.length
                if node.in_leaf_set:
                    leaves.discard(node)
            cd.lock_ref += 1
            if events:
                self._emit(EventKind.LOCK, node, Cause.REQUEST, node.length, f"lock_ref={cd.lock_ref}")
            node = node.parent
        tree.evictable[i] -= delta  # newly locked tokens move evictable -> protected
        tree.protected[i] += delta
        receipt.delta = delta

    def locked_nodes(self, node: TreeNode, receipt) -> list:
        out, root = [], self.tree.root
        while node is not root:
            out.append(node)
            node = node.parent
        return out

    def release_lock(self, node: TreeNode, receipt: DecLockRefParams) -> None:
        i = self.index
        tree = self.tree
        root = tree.root
        events = tree.events.enabled
        # The receipt check guarantees every node on the path holds this lock (a split
        # copies lock_ref to the new parent), so there is nothing to validate here. A node
        # whose child on the path holds Full KV cannot be a device leaf; the anchor's leaf
        # state is the tree's, updated once every component has released (locks.py).
        below_held = True
        while node is not root:
            cd = node.data[i]
            assert cd.lock_ref > 0, f"full lock_ref=0 on node {node.id} under a live receipt"
            if cd.lock_ref == 1:
                if cd.value is not None:
                    tree.evictable[i] += node.length
                    tree.protected[i] -= node.length
                cd.lock_ref = 0
                if not below_held:
                    tree.update_leaf_state(node)
            else:
                cd.lock_ref -= 1
            if events:
                self._emit(EventKind.UNLOCK, node, Cause.REQUEST, node.length, f"lock_ref={cd.lock_ref}")
            below_held = cd.value is not None
            node = node.parent

    def free_device_values(self, values: list[torch.Tensor], cause: Cause, node: Optional[int]) -> None:
        # Full side only: each other component frees its own share of an evicted node
        self.cache.free_kv(values, cause, node, full_only=True, trusted=True)  # the tree's own values
