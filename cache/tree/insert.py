"""Insert and split: the tree core's steps that add to the tree.

``insert`` walks the key (splitting the node it leaves part-way), lets the components
claim overlapping slots, frees the duplicates and adds a leaf for the rest;
``_split_node`` cuts a node in two for a walk or a component. A new node gets its key,
page hashes (while the tree hashes pages) and TLRU depths (for a policy that reads them)
here, and ``set_component_value`` attaches an auxiliary component's value to a node
later. Mixed into UnifiedTreeCore, whose state and hook lists it uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import torch

from ..basics.errors import InvalidValueError
from ..basics.keys import TOKEN_BYTES, child_key, namespace_parts
from ..basics.page_hash import node_chain, split_hashes
from ..basics.params import InsertParams, InsertResult
from ..observe.actions import FreeDeviceKV, FreeDeviceKVFullOnly
from ..observe.events import Cause, EventKind
from .leaf_policies import raise_tlru_history
from .node import TreeNode
from .walk import walk_key


class TreeInsert:
    """Mixed into UnifiedTreeCore: insert, split, and component values set later."""

    def insert(self, params: InsertParams, apply_actions: Callable[[list], None]) -> InsertResult:
        """Walk/split along the key, let components claim overlapping slots, free the
        duplicates and add a leaf for the rest. Deferred actions are handed to
        ``apply_actions``: at once when a component emitted a barrier action, the rest
        at the end."""
        key = params.key
        data = key.data
        ps = self.page_size
        total = len(data) // TOKEN_BYTES
        ntok = total - total % ps
        value = self._check_value(params.value, total, ntok)
        root = self.root
        root.last_access_time = self.tick()
        if ntok == 0:
            return InsertResult(prefix_len=0, last_device_node=root.id, mamba_exist=True)
        limit = ntok * TOKEN_BYTES
        if limit != len(data):
            data = data[:limit]
        ek = key.namespace
        prev = params.prev_prefix_len
        inserted_len = params.inserted_len
        priority = params.priority
        if priority > root.priority:  # as v0.5.23: the root carries the highest insert priority, which a
            root.priority = priority  # host-only node fetched below it inherits (prefetch_placement.py)
        result = InsertResult(prefix_len=0, total_len=ntok)
        pending: list = []
        walkdown = self._walkdown_hooks
        overlap_hooks = self._overlap_hooks
        events = self.events.enabled
        node = root
        done = 0  # tokens walked
        deferred = 0  # pending[:deferred] are known to be deferrable
        path, cut = walk_key(root, data, ek, ps)
        partial = path[-1] if cut is not None else None  # the walk's last node, to cut
        for child in path:
            plen = child.length
            t = self._clock  # self.tick(), inlined on this hot path
            self._clock = t + 1.0
            child.last_access_time = t
            for hook in walkdown:
                hook(child)
            if child is partial:
                plen = cut
                child = self._split_node(child, cut)
            if priority > child.priority:
                child.priority = priority
            consumed = plen
            if child.data[0].value is None:  # host-only (host tier): the key's slots bring it back
                self.unevict(child, value[done : done + plen], params.session_id)
                consumed = 0
            for component in overlap_hooks:
                taken = component.on_insert_overlap(child, plen, done, value, params, result, pending)
                if taken < consumed:
                    consumed = taken
            dup_start = prev - done if prev > done else 0
            if dup_start < consumed:
                self._free_duplicates(value, done + dup_start, done + consumed, params, child, pending)
            if done + plen > inserted_len:
                child.hit_count += self.hit_step
                if self.host_policy is not None:
                    self.queue_backup(child, pending)
            if len(pending) > deferred:
                if not all(a.deferrable for a in pending[deferred:]):
                    apply_actions(pending)  # a barrier: later steps read what these actions set
                    pending = []
                deferred = len(pending)
            node = child
            done += plen
        if done < ntok:
            target = self._add_leaf(node, data[done * TOKEN_BYTES :], ek, value[done:ntok], priority)
            is_new_leaf = True
            if events:
                self.events.emit(EventKind.ADD, None, target.id, Cause.REQUEST, target.length)
            if self.kv_events.enabled:
                self.kv_events.store(target, session_id=params.session_id)
        else:
            target, is_new_leaf = node, False
        result.prefix_len = done
        result.last_device_node = target.id
        for component in self._commit_hooks:
            component.commit_insert(target, is_new_leaf, params, result, pending)
        # a new leaf counts its hit after the commit hooks (which may have split it):
        # the upper parts a split carved off keep no hit, as in v0.5.23
        if is_new_leaf and done + target.length > params.inserted_len:
            target.hit_count += self.hit_step
            if self.host_policy is not None:
                self.queue_backup(target, pending)
        elif self.host_policy is not None and target is not root:
            self.queue_aux_backup(target, pending)
        if target is not root:
            for hook in self._insert_end_hooks:
                hook(target)
        if self._touched is not None:
            self._touched.add(target.id)
        if pending:
            apply_actions(pending)
        return result

    def _check_value(self, value: Optional[torch.Tensor], key_len: int, aligned: int) -> torch.Tensor:
        if value is None:
            raise InvalidValueError("insert needs a value: the slot indices of the key's tokens")
        if not isinstance(value, torch.Tensor) or value.dtype is not torch.int64 or value.dim() != 1:
            raise InvalidValueError("value must be a 1-D int64 tensor of slot indices")
        n = value.shape[0]
        if n != key_len and n != aligned:
            raise InvalidValueError(f"value has {n} slots but the key has {key_len} tokens")
        if value.device != self.device:
            raise InvalidValueError(f"value is on {value.device}, the cache on {self.device}")
        if not self.slots_in_pool(value):  # the frees of its duplicates, and eviction later, trust this
            raise InvalidValueError(f"value holds slot ids outside the Full pool ({int(value.min())}..{int(value.max())})")
        return value

    def _free_duplicates(self, value, start: int, end: int, params: InsertParams, node: TreeNode, pending: list) -> None:
        """Incoming slots for tokens the tree already holds go back to the pools. Below
        the request's SWA eviction floor only the Full side is still the request's."""
        floor = params.swa_evicted_seqlen
        if floor > start:
            cut = min(floor, end)
            pending.append(FreeDeviceKVFullOnly([value[start:cut]], node.id))
            start = cut
        if start < end:
            pending.append(FreeDeviceKV([value[start:end]], node.id))

    def _add_leaf(self, parent: TreeNode, key: bytes, namespace, value: torch.Tensor, priority: int) -> TreeNode:
        node = self._new_node(priority)
        node.parent = parent
        node.namespace = namespace
        self._set_key(node, key)
        node.data[0].value = value
        parent.children[node.child_key] = node
        if self.page_hashing:
            self.hash_node(node)
        if self.tlru_bookkeeping:
            raise_tlru_history(node)
        self.evictable[0] += node.length
        self.leaves.add(node)
        if parent.in_leaf_set:
            self.leaves.discard(parent)
        if self._touched is not None:
            self._touched.add(parent.id)
        return node

    def _split_node(self, child: TreeNode, split_len: int) -> TreeNode:
        """Cut ``child`` after ``split_len`` tokens; the new upper node is returned."""
        new = self._new_node(child.priority)
        parent = child.parent
        cut = split_len * TOKEN_BYTES
        new.parent = parent
        new.namespace = child.namespace
        self._set_key(new, child.key[:cut])
        self._set_key(child, child.key[cut:])
        new.hit_count = child.hit_count
        new.creation_time = child.creation_time
        if child.page_hashes is not None:  # the chain does not change, it is only cut
            new.page_hashes, child.page_hashes = split_hashes(child.page_hashes, split_len, self.page_size)
            new.event_hashes, child.event_hashes = split_hashes(child.event_hashes, split_len, self.page_size)
        if self.tlru_bookkeeping:  # no depth added: the upper part ends split_len in, the child keeps its own
            new.tlru_prefix_len = parent.tlru_prefix_len + split_len
            new.tlru_history_len = child.tlru_history_len
        new.children = {child.child_key: child}
        child.parent = new
        for component in self.components:
            component.redistribute_on_split(new, child)
        if self.host_policy is not None:
            self.track_duplicate(new)
        parent.children[new.child_key] = new
        # the suffix keeps its recency; the new prefix goes right behind it
        for component in self.components[1:]:
            if component.uses_lru and new.data[component.index].value is not None:
                lru = self.lru[component.name]
                if new not in lru:
                    lru.insert_after(child, new)
        child.last_access_time = self.tick()
        if self._touched is not None:
            self._touched.update((child.id, parent.id))
        # the upper node has a child, so it is never an evictable leaf
        if self.events.enabled:
            self.events.emit(EventKind.SPLIT, None, new.id, Cause.REQUEST, new.length, f"child {child.id} keeps {child.length}")
        return new

    def split_node(self, node: TreeNode, split_len: int) -> TreeNode:
        """Components' entry to a split (e.g. at an SWA window boundary)."""
        return self._split_node(node, split_len)

    # ---- a new node's key and page hashes ---------------------------------------------
    def _child_key_of(self, node: TreeNode):
        return child_key(node.key, 0, self.page_bytes, node.namespace)

    def _set_key(self, node: TreeNode, data: bytes) -> None:
        node.set_key(data)
        node.child_key = child_key(data, 0, self.page_bytes, node.namespace)

    def hash_node(self, node: TreeNode) -> None:
        """Give ``node`` its page hashes (its parent's are already set)."""
        node.page_hashes = node_chain(node, self.page_size)
        plain = node.namespace is None or namespace_parts(node.namespace)[:2] == (None, None)
        node.event_hashes = node.page_hashes if plain else node_chain(node, self.page_size, for_events=True)

    def enable_page_hashes(self) -> None:
        """Hash every node from now on, backfilling those built before (parents first)."""
        self.page_hashing = True
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            if node.page_hashes is None:
                self.hash_node(node)
            stack.extend(node.children.values())

    # ---- component values set later (their eviction: cascade.py) ---------------------
    def set_component_value(self, node_id: int, name: str, value: torch.Tensor, cause: Cause = Cause.REQUEST) -> None:
        """Attach an auxiliary component's value (an SWA rebuild, a recovery): the
        node enters that component's LRU at the MRU end, protected if locked."""
        component = self.by_name[name]
        assert component.index != 0, "Full values are set by the insert paths"
        node = self.node_by_id(node_id)
        cd = node.data[component.index]
        recovered = cd.value is None
        assert recovered, f"node {node_id} already has {name} data"
        cd.value = value
        if self._touched is not None:
            self._touched.add(node_id)
        if component.uses_lru:
            self.lru[name].insert_mru(node)
        n = component.value_len(node)
        if cd.lock_ref > 0:
            self.protected[component.index] += n
        else:
            self.evictable[component.index] += n
        if self.events.enabled:
            self.events.emit(EventKind.SET, name, node_id, cause, n)
