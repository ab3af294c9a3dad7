"""The tree side of a storage prefetch: placing pages fetched into host slots below the
prefetch's anchor (SGLang 0.5.23's ``insert_host``).

The walk goes down from the anchor along the fetched key. Nodes that are already there
keep their place (a partly matched one is split); under write-through a node with no
host copy is refilled with the fetched slots, and the fetched slots for nodes that have
one are the caller's to free (``HostInsert.prefix_len``). What is left becomes one new
host-only node, unless it would hang below a node with no host copy: write-through's
rule that a host copy's parent has one too, so the tail is dropped instead. The
controller allocated the host slots and frees what the tree does not keep.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from ..observe.events import Cause, EventKind
from ..basics.keys import TOKEN_BYTES, RadixKey
from ..observe.kv_events import CPU
from .leaf_policies import raise_tlru_history
from .node import TreeNode
from .walk import walk_key


class HostInsert(NamedTuple):
    prefix_len: int  # fetched tokens the tree already held a host copy of: their slots go back
    node: Optional[TreeNode]  # the node the key ends at if it has a host copy (new, refilled or present)
    dropped: bool = False  # the tail would have hung below a node with no host copy: nothing of it kept
    refilled: tuple[TreeNode, ...] = ()  # nodes that got the fetched slots as their host copy


class TreePrefetch:
    """Mixed into UnifiedTreeCore beside TreeHostTier, whose state it uses."""

    def insert_host(self, anchor: TreeNode, key: RadixKey, host_rows: torch.Tensor) -> HostInsert:
        """Put ``key``'s fetched host slots ``host_rows`` below ``anchor``. ``key`` is
        whole pages; a new node's page hashes are its chain from the anchor's (the same
        hashes the pages were fetched by)."""
        ps = self.page_size
        data = key.data
        assert len(data) // TOKEN_BYTES == host_rows.shape[0] and len(data) % (ps * TOKEN_BYTES) == 0
        anchor.last_access_time = self.tick()
        write_back = self.host_policy == "write_back"
        # below the root a path keeps its root child's namespace: an EAGLE span's own
        # head is the token before the span, not the one the path's first pair begins with
        namespace = key.namespace if anchor is self.root else anchor.namespace
        path, cut = walk_key(anchor, data, namespace, ps)
        node, done, held, refilled = anchor, 0, 0, []
        for child in path:
            child.last_access_time = self.tick()
            length = child.length
            if child is path[-1] and cut is not None:
                child, length = self._split_node(child, cut), cut
            if not write_back:
                if child.data[0].host_value is None:
                    self._refill(child, host_rows[done : done + length])
                    refilled.append(child)
                else:
                    assert not refilled, f"node {child.id} has a host copy below the refilled node {refilled[-1].id}"
                    held += length
            node, done = child, done + length
        if self._touched is not None:  # the walk refreshed access times from the anchor down to it
            self._touched.add(node.id)
        prefix = done if write_back else held
        if done == host_rows.shape[0]:
            ends = node if node is not self.root and node.data[0].host_value is not None else None
            return HostInsert(prefix, ends, False, tuple(refilled))
        if node is not self.root and node.data[0].host_value is None and not write_back:
            return HostInsert(prefix, None, True, tuple(refilled))
        tail = self._add_host_only_leaf(node, data[done * TOKEN_BYTES :], namespace, host_rows[done:])
        return HostInsert(prefix, tail, False, tuple(refilled))

    def attach_fetched_host(self, node: TreeNode, component, slots: torch.Tensor) -> None:
        """An auxiliary component's staged slots, fetched from storage, become ``node``'s
        host copy (a prefetch's commit: SWA's window, Mamba's state)."""
        node.data[component.index].host_value = slots
        n = component.value_len(node)
        self.host_units[component.name] += n
        self.refresh_host_lru(node, component, even_locked=True)  # v0.5.23 lists it even under a lock
        self.update_host_leaf_state(node)
        if node.parent is not None:
            self.update_host_leaf_state(node.parent)
        if self._touched is not None:
            self._touched.add(node.id)
        if self.events.enabled:
            self.events.emit(EventKind.SET, component.name, node.id, Cause.REQUEST, n, "host copy fetched from storage")

    def _refill(self, node: TreeNode, rows: torch.Tensor) -> None:
        """A device node without a host copy takes the fetched slots as one."""
        self.set_host_value(node, self.components[0], rows)
        if self.kv_events.enabled:
            self.kv_events.store(node, CPU)
        self.update_host_leaf_state(node)
        self.track_duplicate(node)

    def _add_host_only_leaf(self, parent: TreeNode, data: bytes, namespace, rows: torch.Tensor) -> TreeNode:
        node = self._new_node(parent.priority)
        node.parent = parent
        node.namespace = namespace
        self._set_key(node, data)
        parent.children[node.child_key] = node
        if self.tlru_bookkeeping:
            raise_tlru_history(node)
        node.data[0].host_value = rows
        self.host_held += node.length
        if self.page_hashing:
            self.hash_node(node)
        self.update_host_leaf_state(node)
        self.update_host_leaf_state(parent)  # a host-only parent (fetched earlier) is a host leaf no more
        self.update_leaf_state(parent)
        if self._touched is not None:
            self._touched.update((node.id, parent.id))
        if self.events.enabled:
            self.events.emit(EventKind.ADD, None, node.id, Cause.REQUEST, node.length, "host-only, fetched from storage")
        if self.kv_events.enabled:
            self.kv_events.store(node, CPU)
        return node
