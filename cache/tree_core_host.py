"""The tree core's host tier (HiCache): which nodes have a host copy, and what that
changes in eviction, matching and inserting.

A node is *backed up* when its Full KV has a host copy (``host_value``). Device
eviction of a backed-up leaf *demotes* it: its device KV goes, the node stays as
host-only (Full ``value`` None), and a later match counts it as a host hit that
``load_back`` can bring back. Host-only nodes are always below the device ones (only
device leaves are demoted, and a load or an insert brings a path back top-down), so a
path is device nodes, then host-only ones. Host eviction takes *host leaves*:
host-only, unlocked on the host, childless. The tree decides; the controller's
``HostTier`` copies and frees (the tree core never touches a pool).
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Optional

import torch

from .actions import BackupKV
from .events import Cause, EventKind

if TYPE_CHECKING:
    from .eviction import EvictionBatch
    from .params import MatchResult
    from .tree_node import TreeNode


class TreeHostTier:
    """Mixed into UnifiedTreeCore. ``host_policy`` None: no host tier (every method
    here is then unused and every node keeps Full KV on the device)."""

    host_policy: Optional[str] = None
    write_through_threshold: Optional[int] = None

    host_held = 0  # tokens with a host copy (the host pool's share the tree holds)
    hit_step = 1  # an insert's hit count step: 0 under write-back (v0.5.23 counts no hits there)

    def enable_host_tier(self, policy: str, write_through_threshold: Optional[int]) -> None:
        self.host_policy = policy
        self.write_through_threshold = write_through_threshold
        self.hit_step = 0 if policy == "write_back" else 1
        self.reset_host_tier()

    def reset_host_tier(self) -> None:
        self.host_leaves: set[TreeNode] = set()
        self.host_held = 0
        # write-back: nodes whose Full KV came back to the device while keeping a host
        # copy, oldest first: host pressure reclaims these redundant copies first
        self.host_duplicates: dict[int, TreeNode] = {}

    # ---- state -------------------------------------------------------------------
    @staticmethod
    def backed_up(node: TreeNode) -> bool:
        return node.data[0].host_value is not None

    def is_host_leaf(self, node: TreeNode) -> bool:
        """Host-only, unlocked on the host, no children: what host eviction may take."""
        if node is self.root or node.children or node.data[0].value is not None or node.data[0].host_value is None:
            return False
        return all(cd.host_lock_ref == 0 for cd in node.data)

    def update_host_leaf_state(self, node: TreeNode) -> None:
        if self.host_policy is None:
            return
        if self.is_host_leaf(node):
            self.host_leaves.add(node)
        else:
            self.host_leaves.discard(node)

    # ---- backup ------------------------------------------------------------------
    def backup_chain(self, node: TreeNode) -> list[TreeNode]:
        """``node`` and its ancestors without a host copy, root side first (a backed-up
        node's parent is always backed up, so a load-back path has no gap)."""
        chain = []
        while node is not self.root and not self.backed_up(node):
            chain.append(node)
            node = node.parent
        chain.reverse()
        return chain

    def track_duplicate(self, node: TreeNode) -> None:
        """Write-back: a node with Full KV on both tiers joins the reclaimable copies
        (where one is born: an unevict, a load, the upper part of a split)."""
        cd = node.data[0]
        if self.host_policy == "write_back" and cd.value is not None and cd.host_value is not None:
            self.host_duplicates.setdefault(node.id, node)

    def queue_backup(self, node: TreeNode, chunked: bool, pending: list) -> None:
        """Write-through: when an insert's hit made ``node`` due for a host copy, queue
        it (with its ancestors that have none) for the controller."""
        threshold = self.write_through_threshold
        if (threshold is not None and not chunked and node.data[0].value is not None
                and not self.backed_up(node) and node.hit_count >= threshold):
            pending.append(BackupKV(tuple(self.backup_chain(node)), node.id))

    def set_host_value(self, node: TreeNode, host: torch.Tensor) -> None:
        """The controller copied ``node``'s Full KV to ``host`` slots."""
        assert node.data[0].value is not None and not self.backed_up(node), f"node {node.id} cannot be backed up"
        node.data[0].host_value = host
        self.host_held += node.length
        if self._touched is not None:
            self._touched.add(node.id)
        if self.events.enabled:
            self.events.emit(EventKind.BACKUP, "full", node.id, Cause.REQUEST, node.length, "device -> host")

    # ---- transfers in flight ---------------------------------------------------------
    def mark_transfer(self, nodes: list[TreeNode], mark: tuple[str, int]) -> None:
        """``nodes`` are in the copy in flight ``mark`` (kind, ack id); a split passes
        the mark to the upper part, as it passes the locks."""
        for node in nodes:
            node.data[0].metadata["transfer"] = mark
            if self._touched is not None:
                self._touched.add(node.id)

    def clear_transfer(self, node: TreeNode, mark: tuple[str, int]) -> list[TreeNode]:
        """The ack of ``mark``: clear it from ``node`` and the nodes above that carry it
        (the path of a load, and the upper parts of splits). Returns them."""
        cleared = []
        while node is not self.root and node.data[0].metadata.get("transfer") == mark:
            del node.data[0].metadata["transfer"]
            cleared.append(node)
            if self._touched is not None:
                self._touched.add(node.id)
            node = node.parent
        return cleared

    # ---- device eviction -----------------------------------------------------------
    def demote(self, node: TreeNode, batch: EvictionBatch) -> None:
        """Device eviction of a backed-up leaf: its device KV goes, the node stays
        host-only."""
        assert node.in_leaf_set and self.backed_up(node), f"node {node.id} is not a backed-up device leaf"
        full = self.components[0]
        n = full.evict_component(node, batch)
        if self.events.enabled:
            self.events.emit(EventKind.DEMOTE, "full", node.id, batch.cause, n, "device KV freed, host copy kept")
        self._detach(node, full)
        self.leaves.discard(node)
        self.update_host_leaf_state(node)
        self.update_leaf_state(node.parent)

    # ---- host eviction -------------------------------------------------------------
    def evict_host(self, num_tokens: int) -> tuple[list[torch.Tensor], int]:
        """Remove host leaves, least recently used first, until ``num_tokens`` host
        tokens are freed (or none is left); an ancestor left host-only and childless is
        a host leaf in turn. Returns the host slots to free and the tokens freed."""
        frees: list[torch.Tensor] = []
        freed = 0
        if self.host_policy == "write_back":
            freed = self._reclaim_duplicates(num_tokens, frees)
        # one heap per call (not a scan per victim); a parent that becomes a host leaf joins it
        heap = [(n.last_access_time, n.id, n) for n in self.host_leaves] if freed < num_tokens else []
        heapq.heapify(heap)
        while freed < num_tokens and heap:
            node = heapq.heappop(heap)[2]
            self.host_leaves.discard(node)
            cd = node.data[0]
            frees.append(cd.host_value)
            freed += node.length
            self.host_held -= node.length
            cd.host_value = None
            if self.events.enabled:
                self.events.emit(EventKind.HOST_EVICT, "full", node.id, Cause.CAPACITY, node.length,
                                 f"need {num_tokens}")
            parent = node.parent
            self._remove_from_parent(node, Cause.CAPACITY, "host copy evicted")
            self.update_host_leaf_state(parent)
            if parent in self.host_leaves:
                heapq.heappush(heap, (parent.last_access_time, parent.id, parent))
        return frees, freed

    def _reclaim_duplicates(self, num_tokens: int, frees: list[torch.Tensor]) -> int:
        """Write-back under host pressure: drop the host copies of nodes back on the
        device, oldest first — sparing device leaves (about to be demoted, they need
        their copy) on a first pass, taking them on a second. The nodes stay."""
        freed = 0
        for spare_leaves in (True, False):
            for node_id, node in list(self.host_duplicates.items()):
                if freed >= num_tokens:
                    return freed
                cd = node.data[0]
                if self.nodes.get(node_id) is not node or cd.value is None or cd.host_value is None:
                    del self.host_duplicates[node_id]  # no longer a duplicate
                    continue
                if (spare_leaves and node.in_leaf_set) or cd.host_lock_ref:
                    continue
                frees.append(cd.host_value)
                cd.host_value = None
                freed += node.length
                self.host_held -= node.length
                del self.host_duplicates[node_id]
                if self._touched is not None:
                    self._touched.add(node_id)
                if self.events.enabled:
                    self.events.emit(EventKind.HOST_EVICT, "full", node_id, Cause.CAPACITY, node.length,
                                     "redundant host copy (the device has it)")
        return freed

    def drop_host_subtree(self, node: TreeNode) -> list[torch.Tensor]:
        """Write-back could not back up a device leaf: before it is deleted, its
        host-only descendants go (children first). Returns their host slots."""
        frees = []
        stack = list(node.children.values())
        order = []
        while stack:
            child = stack.pop()
            order.append(child)
            stack.extend(child.children.values())
        for child in reversed(order):  # deepest first: each is childless when it goes
            assert child.data[0].value is None and not any(cd.host_lock_ref for cd in child.data)
            frees.append(child.data[0].host_value)
            self.host_held -= child.length
            child.data[0].host_value = None
            self.host_leaves.discard(child)
            if self.events.enabled:
                self.events.emit(EventKind.HOST_EVICT, "full", child.id, Cause.CASCADE, child.length,
                                 f"under #{node.id}, dropped without a host copy")
            self._remove_from_parent(child, Cause.CASCADE, "host copy dropped with its parent")
        return frees

    # ---- match and insert ------------------------------------------------------------
    def host_match(self, path: list[TreeNode], best: TreeNode) -> MatchResult:
        """A match along ``path`` (ending on ``best``) with a host tier: the device
        prefix ends at the deepest node with device KV; the host-only nodes below it
        are the host hit."""
        device, chunks, host_hit = self.root, [], 0
        for node in path:
            value = node.data[0].value
            if value is not None:
                device = node
                chunks.append(value)
            else:
                host_hit += node.length
        result = self._finish_match(best, chunks, sum(n.length for n in path), best)
        if host_hit:
            result = result._replace(last_device_node=device.id, host_hit_length=host_hit)
        return result

    def unevict(self, node: TreeNode, value: torch.Tensor) -> None:
        """An insert walked over a host-only node holding the key's slots for it: they
        become its device KV again (not duplicates)."""
        self.restore_device(node, value, "insert brought device KV")
        self.track_duplicate(node)

    def hold_host(self, nodes: list[TreeNode], delta: int) -> None:
        """Host-lock ``nodes`` (+1) or release them (-1): a load-back's path must not
        be host-evicted by the device eviction that makes room for it."""
        for node in nodes:
            node.data[0].host_lock_ref += delta
            self.update_host_leaf_state(node)

    def host_path(self, node: TreeNode) -> list[TreeNode]:
        """The host-only nodes from below the last device ancestor down to ``node``."""
        path = []
        while node is not self.root and node.data[0].value is None:
            path.append(node)
            node = node.parent
        path.reverse()
        return path

    def restore_device(self, node: TreeNode, value: torch.Tensor, detail: str = "host -> device") -> None:
        """A host-only node has device KV again: in ``value`` slots (a load-back copied
        its host copy there, or an insert brought fresh KV). The controller registers a
        load's duplicates afterwards, deepest first, as SGLang's load ack does."""
        assert node.data[0].value is None and self.backed_up(node), f"node {node.id} is not host-only"
        node.data[0].value = value
        if node.data[0].lock_ref > 0:
            self.protected[0] += node.length
        else:
            self.evictable[0] += node.length
        self.host_leaves.discard(node)
        if self._touched is not None:
            self._touched.add(node.id)
        if self.events.enabled:
            self.events.emit(EventKind.LOAD, "full", node.id, Cause.REQUEST, node.length, detail)
        self.update_leaf_state(node)
        self.update_leaf_state(node.parent)
