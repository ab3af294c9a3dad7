"""The host tier on the way back: a match that counts host copies (``host_match``), and
host-only nodes getting device KV again (a load-back's ``restore_device``, an
insert's ``unevict``), with the host locks that keep a path in place meanwhile.

A match counts a host-only node as a host hit that a load-back can bring back; the
host locks (``hold_host``, the auxiliary components' ``lock_aux_host``, and the marks
a store or a prefetch files to release its lock later) keep host eviction off it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from ..basics.base_component import FULL
from ..observe.events import Cause, EventKind
from .walk import accepted

if TYPE_CHECKING:
    from ..basics.params import MatchResult
    from .node import TreeNode


class TreeHostLoad:
    """Mixed into UnifiedTreeCore beside TreeHostTier, whose state it uses."""

    def host_match(self, path: list[TreeNode], last: TreeNode, key_len: int) -> MatchResult:
        """A match along ``path`` with a host tier. The best node is the deepest where
        every component accepts its data on either tier; the device prefix ends at the
        deepest where every component has it on the device. The host hit is the Full
        host copies between the two (device nodes with a copy count too, as in v0.5.23)."""
        host_checks = [v for c in self.components[1:] if (v := c.create_host_match_validator()) is not None]
        device_checks = [v for c in self.components[1:] if (v := c.create_match_validator()) is not None]
        root = self.root
        best = device = root
        chunks, device_chunks, walked, on_device_len, kept = [], 0, 0, 0, 0
        for node in path:
            walked += node.length
            on_device = node.data[0].value is not None
            if on_device:
                chunks.append(node.data[0].value)
                on_device_len += node.length
            if accepted(device_checks, node) and on_device:
                device, device_chunks, kept = node, len(chunks), on_device_len
            if accepted(host_checks, node):
                best = node
        host_hit = 0
        node = best
        while node is not device and node is not root:
            if node.data[0].host_value is not None:
                host_hit += node.length
            node = node.parent
        del chunks[device_chunks:]
        return self._finish_match(best, chunks, walked, last, key_len, kept, device, host_hit)

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
        split passes it to the upper part: components/full/host.py)."""
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
            self.events.emit(EventKind.LOAD, FULL, node.id, Cause.REQUEST, node.length, detail)
        if self.kv_events.enabled:  # a load publishes at its commit, before the ack
            self.kv_events.store(node, session_id=session_id)
        self.update_leaf_state(node)
        self.update_leaf_state(node.parent)
