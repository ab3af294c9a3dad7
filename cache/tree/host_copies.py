"""The tree core's host tier (HiCache): which nodes have a host copy, and what that
changes in eviction, matching and inserting.

A node is *backed up* when its Full KV has a host copy (``host_value``); an
auxiliary component (Mamba) keeps its own host copy beside its device value. Device
eviction of a backed-up leaf *demotes* it: its device data goes (every component's),
the node stays as host-only (Full ``value`` None), and a later match counts it as a
host hit that ``load_back`` can bring back. Host-only nodes are always below the
device ones (only device leaves are demoted, and a load or an insert brings a path
back top-down), so a path is device nodes, then host-only ones. Full host eviction
takes *host leaves* (host-only, unlocked, childless) whole; an auxiliary component's
host eviction walks its *host LRU* (nodes whose data is on the host only, in the
order they got there). The tree decides; the controller's ``HostTier`` copies and
frees the host slots this side queues in ``host_frees`` (the tree core never touches
a pool).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING, Optional

import torch

from ..observe.actions import BackupKV
from ..observe.events import Cause, EventKind
from ..observe.kv_events import CPU
from .lru import LRUList

if TYPE_CHECKING:
    from ..observe.eviction_batch import EvictionBatch
    from ..basics.params import MatchResult
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
        self.host_components = [c for c in self.components[1:] if getattr(c, "keeps_host_copy", False)]
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
        self.host_lru: dict[str, LRUList] = {c.name: LRUList(n + c.index, 2 * n) for c in self.host_components}
        self.host_frees: list[tuple[str, torch.Tensor]] = []  # (component, host slots) for the controller
        self.host_units = {c.name: 0 for c in self.host_components}  # each auxiliary's units with a host copy

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
        host could not take it. A node the backup changed is left to the walk."""
        cd = node.data[component.index]
        if (component in self.host_components and cd.host_value is None and not self.backed_up(node)
                and node.data[0].value is not None and not node.in_leaf_set):
            self.backup_before_tombstone(node, component)
            if self.nodes.get(node.id) is not node or cd.value is None or node.in_leaf_set:
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

    # ---- device eviction -----------------------------------------------------------
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
                    self.events.emit(EventKind.DEMOTE, "full", node.id, batch.cause, n, f"device data freed, {kept}")
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
    def evict_host(self, num_tokens: int, component: str = "full") -> int:
        """Free host copies until ``num_tokens`` units of ``component`` are freed (or
        nothing more can go); the slots wait in ``host_frees``. Full: host leaves,
        in the eviction policy's order, whole (an ancestor left host-only and childless is
        a host leaf in turn); write-back first reclaims redundant copies. Auxiliary:
        its host LRU, oldest first; a host leaf goes whole, anything else loses only
        that component's host copy."""
        if component != "full":
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
        freed = 0
        while freed < num and (node := self.host_lru_first(component)) is not None:
            freed += component.value_len(node)
            if self.is_host_leaf(node):
                self.evict_host_leaf(node, f"{component.name} host eviction, need {num}")
                continue
            self.drop_host_value(node, component, Cause.CAPACITY, f"need {num}")
            for lower in self.host_components:  # the cascade: lower-ranked host copies go too
                if lower.internal_priority < component.internal_priority and node.data[lower.index].host_value is not None:
                    self.drop_host_value(node, lower, Cause.CASCADE, f"from {component.name}")
        return freed

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

    # ---- match and insert ------------------------------------------------------------
    def host_match(self, path: list[TreeNode], last: TreeNode) -> MatchResult:
        """A match along ``path`` with a host tier. The best node is the deepest where
        every component accepts its data on either tier; the device prefix ends at the
        deepest where every component has it on the device. The host hit is the Full
        host copies between the two (device nodes with a copy count too, as in v0.5.23)."""
        host_checks = [v for c in self.components[1:] if (v := c.create_host_match_validator()) is not None]
        device_checks = [v for c in self.components[1:] if (v := c.create_match_validator()) is not None]
        root = self.root
        best = device = root
        chunks, device_chunks, walked = [], 0, 0
        for node in path:
            walked += node.length
            on_device = node.data[0].value is not None
            if on_device:
                chunks.append(node.data[0].value)
            ok = on_device
            for check in device_checks:  # every one sees every node: they keep state
                if not check(node, node.length):
                    ok = False
            if ok:
                device, device_chunks = node, len(chunks)
            ok = True
            for check in host_checks:
                if not check(node, node.length):
                    ok = False
            if ok:
                best = node
        host_hit = 0
        node = best
        while node is not device and node is not root:
            if node.data[0].host_value is not None:
                host_hit += node.length
            node = node.parent
        del chunks[device_chunks:]
        return self._finish_match(best, chunks, walked, last, device, host_hit)

    just_unevicted: Optional[TreeNode] = None  # for SWA's overlap hook, which recovers its window

    def unevict(self, node: TreeNode, value: torch.Tensor, session_id: Optional[str] = None) -> None:
        """An insert walked over a host-only node holding the key's slots for it: they
        become its device KV again (not duplicates)."""
        self.restore_device(node, value, "insert brought device KV", session_id)
        self.track_duplicate(node)
        self.just_unevicted = node

    def hold_host(self, nodes: list[TreeNode], delta: int) -> None:
        """Host-lock ``nodes``' Full copies (+1) or release them (-1): a load-back's
        path must not be host-evicted meanwhile."""
        for node in nodes:
            node.data[0].host_lock_ref += delta
            self.update_host_leaf_state(node)
            if self._touched is not None:
                self._touched.add(node.id)

    def add_mark(self, nodes, mark: str, ident) -> None:
        """File ``ident`` under the metadata key ``mark`` on each node's Full data (a
        split passes it to the upper part: full_host.py)."""
        for node in nodes:
            full = node.data[0]
            full.metadata[mark] = full.metadata.get(mark, ()) + (ident,)
            if self._touched is not None:
                self._touched.add(node.id)

    def take_mark(self, node: TreeNode, mark: str, ident) -> list[TreeNode]:
        """Remove ``ident`` from ``node`` and the parts split off above it since (they
        carry it too); returns those nodes, ``node`` first."""
        taken = []
        while node is not self.root and self.nodes.get(node.id) is node:
            full = node.data[0]
            marks = full.metadata.get(mark, ())
            if ident not in marks:
                break
            rest = tuple(m for m in marks if m != ident)
            if rest:
                full.metadata[mark] = rest
            else:
                del full.metadata[mark]
            if self._touched is not None:
                self._touched.add(node.id)
            taken.append(node)
            node = node.parent
        return taken

    def release_marked_host_lock(self, node: TreeNode, mark: str, ident) -> None:
        """Release the Full host lock a store or a prefetch (``ident``, filed under the
        metadata key ``mark``) took on ``node``: on it and on the parts split off above it
        since, which carry the mark as they carry the lock (v0.5.23 releases up to the
        lock's boundary, which a split moves up)."""
        self.hold_host(self.take_mark(node, mark, ident), -1)

    def lock_aux_host(self, anchor: TreeNode) -> dict:
        """Host-lock every auxiliary component's copies a load from ``anchor`` reads
        (Mamba: the anchor's; SWA: one window up from it); returns the receipts."""
        receipts = {c.name: c.lock_host_copies(anchor) for c in self.host_components}
        self.update_host_leaf_state(anchor)
        return receipts

    def unlock_aux_host(self, anchor: TreeNode, receipts: dict) -> None:
        for component in self.host_components:
            component.unlock_host_copies(anchor, receipts[component.name])
        self.update_host_leaf_state(anchor)

    def host_path(self, node: TreeNode) -> list[TreeNode]:
        """The host-only nodes from below the last device ancestor down to ``node``."""
        path = []
        while node is not self.root and node.data[0].value is None:
            path.append(node)
            node = node.parent
        path.reverse()
        return path

    def restore_device(self, node: TreeNode, value: torch.Tensor, detail: str = "host -> device",
                       session_id: Optional[str] = None) -> None:
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
        if self.kv_events.enabled:  # a load publishes at its commit, before the ack
            self.kv_events.store(node, session_id=session_id)
        self.update_leaf_state(node)
        self.update_leaf_state(node.parent)
