"""The tree core's host tier (HiCache): which nodes carry a host copy, and how they get one.

A node is *backed up* when its Full KV has a host copy (``host_value``); an
auxiliary component (Mamba) keeps its own host copy beside its device value. This
module owns that state (host leaves, host LRUs, the write-back duplicates, the host
slots queued in ``host_frees`` for the controller), the backups queued on insert and
the transfers in flight, and swaps in the host-aware versions of the tree's steps
when a host tier is enabled. Demotion and host eviction are host_eviction.py's;
matching over host copies and bringing them back, host_load.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Optional

import torch

from ..observe.actions import BackupKV
from ..observe.events import Cause, EventKind
from ..observe.kv_events import CPU
from .lru import LRUList
from .session_lru import PartitionedLRUList

if TYPE_CHECKING:
    from ..observe.eviction_batch import EvictionBatch
    from .component_api import HostCopyAPI
    from .node import TreeNode


class TreeHostTier:
    """Mixed into UnifiedTreeCore. ``host_policy`` None: no host tier (every method
    here is then unused and every node keeps its data on the device)."""

    host_policy: Optional[str] = None
    write_through_threshold: Optional[int] = None

    host_held = 0  # Full tokens with a host copy (the host pool's share the tree holds)
    hit_step = 1  # an insert's hit count step: 0 under write-back (v0.5.23 counts no hits there)

    def enable_host_tier(self, policy: str, write_through_threshold: Optional[int]) -> None:
        self.host_policy = policy
        self.write_through_threshold = write_through_threshold
        self.hit_step = 0 if policy == "write_back" else 1
        self.host_components: list[HostCopyAPI] = [
            c for c in self.components[1:] if getattr(c, "keeps_host_copy", False)]
        # host-aware versions of the tree steps, on this tree only: zero cost without a host tier
        self._new_node = self._new_node_with_host_slots  # a host LRU slot per component
        self._add_host_slots(self.root)
        self._detach = self._detach_to_host
        self._remove_from_parent = self._remove_with_host_copies
        self.set_component_value = self._set_value_from_host
        if policy == "write_back":
            self.tombstone = self._tombstone_after_backup
        self.reset_host_tier()

    # the controller's write-back backup of one node, set by the HostTier
    backup_before_tombstone: Optional[Callable[[TreeNode, object], None]] = None

    def reset_host_tier(self) -> None:
        self.host_leaves: set[TreeNode] = set()
        self.host_held = 0
        # write-back: nodes whose Full KV came back to the device while keeping a host
        # copy, oldest first: host pressure reclaims these redundant copies first
        self.host_duplicates: dict[int, TreeNode] = {}
        # per auxiliary component: the nodes with its data on the host only, in the order they got there
        n = len(self.components)
        self.host_lru: dict[str, LRUList] = {c.name: self._new_host_lru(c, n) for c in self.host_components}
        self.host_frees: list[tuple[str, torch.Tensor]] = []  # (component, host slots) for the controller
        self.host_units = {c.name: 0 for c in self.host_components}  # each auxiliary's units with a host copy

    def _new_host_lru(self, component, n: int) -> LRUList:
        """With session refs on, a host copy a session refers to keeps to the MRU side,
        as on the device (v0.5.23 partitions its host LRUs the same way)."""
        if not self.session_radix_cache:
            return LRUList(n + component.index, 2 * n)
        i = component.index
        return PartitionedLRUList(n + i, 2 * n, lambda node: node.data[i].session_ref > 0)

    # ---- state -------------------------------------------------------------------
    @staticmethod
    def backed_up(node: TreeNode) -> bool:
        return node.data[0].host_value is not None

    def is_host_leaf(self, node: TreeNode) -> bool:
        """Host-only, unlocked on the host, no children: what host eviction may take."""
        if node is self.root or node.children or node.data[0].value is not None or node.data[0].host_value is None:
            return False
        return all(cd.host_lock_ref == 0 and cd.lock_ref == 0 for cd in node.data)

    def update_host_leaf_state(self, node: TreeNode) -> None:
        if self.host_policy is None:
            return
        if self.is_host_leaf(node):
            self.host_leaves.add(node)
        else:
            self.host_leaves.discard(node)

    def refresh_host_lru(self, node: TreeNode, component, even_locked: bool = False) -> None:
        """An auxiliary component's host LRU holds host-only data, as v0.5.23's: a node
        leaves it when its data is no longer host-only or when a host lock is taken on
        it (``host_lock``); it joins at the MRU end when it becomes host-only unlocked,
        or (``even_locked``) where v0.5.23 adds it regardless of a lock — a device
        tombstone over a host copy, a copy fetched from storage. A member keeps its
        place (a locked one too: the eviction walk passes it by)."""
        lru = self.host_lru.get(component.name)
        if lru is None:
            return
        if self._touched is not None:
            self._touched.add(node.id)
        cd = node.data[component.index]
        if cd.value is None and cd.host_value is not None and node.id in self.nodes:
            if node not in lru and (cd.host_lock_ref == 0 or even_locked):
                lru.insert_mru(node)
        elif node in lru:
            lru.remove(node)

    def host_lock(self, node: TreeNode, component, delta: int) -> None:
        """Take (+1) or release (-1) a host lock on ``node``'s copy of an auxiliary
        component: the first lock takes the node off the host LRU, the last release
        puts it back at the MRU end if it is not there (v0.5.23's component locks)."""
        cd = node.data[component.index]
        lru = self.host_lru.get(component.name)
        if delta > 0 and cd.host_lock_ref == 0 and lru is not None and node in lru:
            lru.remove(node)
        cd.host_lock_ref += delta
        if self._touched is not None:
            self._touched.add(node.id)
        if delta < 0 and cd.host_lock_ref == 0:
            self.refresh_host_lru(node, component)

    def host_lru_first(self, component) -> Optional[TreeNode]:
        """The least recently used member of a host LRU that no host lock holds."""
        lru = self.host_lru[component.name]
        node = lru.lru_first(skip_locked=False)
        while node is not None and node.data[component.index].host_lock_ref:
            node = lru.prev_of(node, skip_locked=False)
        return node

    # ---- the host-aware tree steps ---------------------------------------------------
    def _add_host_slots(self, node: TreeNode) -> None:
        n = len(self.components)
        node.lru_prev += [None] * n
        node.lru_next += [None] * n
        node.lru_label += [None] * n

    def _new_node_with_host_slots(self, priority: int = 0) -> TreeNode:
        node = type(self)._new_node(self, priority)
        self._add_host_slots(node)
        return node

    def _detach_to_host(self, node: TreeNode, component) -> None:
        type(self)._detach(self, node, component)
        if component.index:
            self.refresh_host_lru(node, component, even_locked=True)

    def _remove_with_host_copies(self, node: TreeNode, cause: Cause, detail: str = "") -> None:
        """A node leaves the tree: whatever host copies it still has go with it."""
        for component in self.components:
            if node.data[component.index].host_value is not None:
                self.drop_host_value(node, component, cause, "with its node")
        self.host_leaves.discard(node)
        self.host_duplicates.pop(node.id, None)
        type(self)._remove_from_parent(self, node, cause, detail)

    def _set_value_from_host(self, node_id: int, name: str, value: torch.Tensor, cause: Cause = Cause.REQUEST) -> None:
        type(self).set_component_value(self, node_id, name, value, cause)
        self.refresh_host_lru(self.nodes[node_id], self.by_name[name])  # on the device again: off the host LRU

    def _tombstone_after_backup(self, node: TreeNode, component, batch: EvictionBatch, cascade: bool = True) -> None:
        """Write-back: an internal node about to lose an auxiliary component's only
        copy (and not backed up itself) is backed up first, Full KV with it, as
        v0.5.23's InternalStateBackup does; it loses its device data even when the
        host could not take it. A leaf is tombstoned only where a session pins it (its
        walk cannot take the leaf whole), and is backed up the same way. A node the
        backup changed is left to the walk."""
        cd, was_leaf = node.data[component.index], node.in_leaf_set
        if (component in self.host_components and cd.host_value is None and not self.backed_up(node)
                and node.data[0].value is not None and (not was_leaf or self.session_radix_cache)):
            self.backup_before_tombstone(node, component)
            if self.nodes.get(node.id) is not node or cd.value is None or node.in_leaf_set != was_leaf:
                return
        type(self).tombstone(self, node, component, batch, cascade)

    def drop_host_value(self, node: TreeNode, component, cause: Cause, detail: str) -> int:
        """Free one component's host copy on ``node`` (queued for the controller)."""
        cd = node.data[component.index]
        self.host_frees.append((component.name, cd.host_value))
        n = component.value_len(node)
        if component.index == 0:
            self.host_held -= n
        else:
            self.host_units[component.name] -= n
        cd.host_value = None
        if self._touched is not None:
            self._touched.add(node.id)
        self.refresh_host_lru(node, component)
        if self.events.enabled:
            self.events.emit(EventKind.HOST_EVICT, component.name, node.id, cause, n, detail)
        return n

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
        """Write-back: a settled node with Full KV on both tiers joins the reclaimable
        copies (where one is born: a backup's ack, an unevict, a load's ack, the upper
        part of a split); an entry keeps its place, and one gone stale stays until
        reclaim sweeps it, as in v0.5.23 (a node written back, demoted and loaded
        again is reclaimed in its first turn)."""
        cd = node.data[0]
        if self.host_policy != "write_back":
            return
        if cd.value is not None and cd.host_value is not None and "transfer" not in cd.metadata:
            self.host_duplicates.setdefault(node.id, node)
        else:
            self.host_duplicates.pop(node.id, None)

    def queue_backup(self, node: TreeNode, pending: list) -> None:
        """Write-through: when an insert's hit made ``node`` due for a host copy, queue
        it (with its ancestors that have none) for the controller."""
        threshold = self.write_through_threshold
        if (threshold is not None and node.data[0].value is not None
                and not self.backed_up(node) and node.hit_count >= threshold):
            pending.append(BackupKV(tuple(self.backup_chain(node)), node.id))

    def queue_aux_backup(self, node: TreeNode, pending: list) -> None:
        """Write-through: an insert ending on a backed-up node gave it auxiliary data
        (a Mamba state) the host has no copy of: back that up, hit or not."""
        if (self.write_through_threshold is not None and self.backed_up(node)
                and "transfer" not in node.data[0].metadata
                and any(c.backup_nodes(node) for c in self.host_components)):
            pending.append(BackupKV((node,), node.id))

    def set_host_value(self, node: TreeNode, component, host: torch.Tensor) -> None:
        """The controller copied ``node``'s data of ``component`` to ``host`` slots."""
        cd = node.data[component.index]
        assert cd.value is not None and cd.host_value is None, f"node {node.id} cannot back up {component.name}"
        cd.host_value = host
        n = component.value_len(node)
        if component.index == 0:
            self.host_held += n
        else:
            self.host_units[component.name] += n
        if self._touched is not None:
            self._touched.add(node.id)
        if self.events.enabled:
            self.events.emit(EventKind.BACKUP, component.name, node.id, Cause.REQUEST, n, "device -> host")

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
        if mark[0] == "backup" and self.kv_events.enabled:  # the host copies are published at the ack, ancestors first
            for done in reversed(cleared):
                self.kv_events.store(done, CPU)
        return cleared
