"""The tree core: one radix tree, per-component data on each node.

It matches, inserts, splits, evicts (tree_core_evict.py) and locks (tree_core_locks.py),
asking the components what each phase means for their data. It never touches a pool:
slots to free come back as deferred actions (insert) or per-component free lists
(eviction) that the controller executes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Optional

import torch

from ..observe.actions import FreeDeviceKV, FreeDeviceKVFullOnly
from ..components.base import TreeComponent
from ..basics.errors import InvalidValueError, UnknownNodeError
from ..observe.events import Cause, EventBus, EventKind
from .leaf_policies import EvictionPolicy
from .hooks import overriding
from ..basics.keys import TOKEN_BYTES, RadixKey, child_key, namespace_order, namespace_parts, unpack_tokens
from ..observe.kv_events import KVEventRecorder
from ..basics.page_hash import node_chain, split_hashes
from .leaf_set import EvictableLeafSet
from .lru import LRUList
from .session_lru import PartitionedLRUList
from .match_verdicts import emit_verdicts
from ..basics.params import IncLockRefResult, InsertParams, InsertResult, MatchResult
from .session_refs import SessionRefTracker
from .cascade import TreeEviction
from .host_copies import TreeHostTier
from .locks import TreeLocks
from .prefetch_placement import TreePrefetch
from .node import TreeNode
from .walk import walk_key

def _child_order(node: TreeNode):
    """(namespace, first page): a total order, since siblings differ in their first page."""
    page = node.child_key if isinstance(node.child_key, bytes) else node.child_key[1]
    return (namespace_order(node.namespace), unpack_tokens(page))


def raise_tlru_history(node: TreeNode) -> None:
    """A new node's depth, and the branch's high-water mark raised up to the first
    ancestor that already reached it (TLRU's history length)."""
    depth = node.parent.tlru_prefix_len + node.length
    node.tlru_prefix_len = depth
    node.tlru_history_len = max(node.tlru_history_len, depth)
    up = node.parent
    while up is not None and up.tlru_history_len < depth:
        up.tlru_history_len = depth
        up = up.parent


class UnifiedTreeCore(TreeLocks, TreeEviction, TreeHostTier, TreePrefetch):
    def __init__(self, components: list[TreeComponent], page_size: int, device: torch.device, events: EventBus,
                 session_radix_cache: bool = False, eviction_policy: Optional[EvictionPolicy] = None):
        if not components or components[0].name != "full":
            raise ValueError("the first component must be 'full'")
        self.components = components
        self.by_name = {c.name: c for c in components}
        self.page_size = page_size
        self.page_bytes = page_size * TOKEN_BYTES
        self.device = device
        self.events = events
        for component in components:
            component.tree = self
        # each hook list holds only the components whose class overrides it (hooks.py)
        self._walkdown_hooks = [c.on_walkdown for c in overriding(components, "on_walkdown")]
        self._match_end_hooks = [c.on_match_end for c in overriding(components, "on_match_end")]
        self._insert_end_hooks = [c.on_insert_end for c in overriding(components, "on_insert_end")]
        self._overlap_hooks = overriding(components, "on_insert_overlap")
        self._commit_hooks = overriding(components, "commit_insert")
        self._finalizers = overriding(components, "finalize_match_result")
        self._release_order = list(reversed(components))  # auxiliaries first, Full last
        self._checked_releases = overriding(components, "check_release")
        self._empty = torch.empty(0, dtype=torch.int64, device=device)
        self._touched: Optional[set[int]] = None  # recording for take_touched (off until asked)
        self.eviction_policy = eviction_policy or EvictionPolicy()  # Full's leaf order (evict_policy.py)
        self.tlru_bookkeeping = self.eviction_policy.reads_branch_depth  # the per-node depths TLRU reads
        # while a checker watches (take_touched is on) and the policy is not lru: each Full victim
        # compared with the policy's first leaf; what disagreed waits for the next check
        self.eviction_audit: Optional[list[tuple[str, str]]] = None
        self.session_radix_cache = session_radix_cache  # session refs (session_refs.py)
        self.session_refs = SessionRefTracker(self, session_radix_cache)
        self.page_hashing = False  # a hash chain on every node (page_hash.py): on with storage or KV events
        self.kv_events = KVEventRecorder(self)  # SGLang's KV event stream (kv_events.py), off by default
        self.reset()

    # ---- state ------------------------------------------------------------
    def reset(self) -> None:
        n = len(self.components)
        self._clock = 1.0
        self._next_id = 0
        self._next_receipt = 0
        self._next_uuid = 1
        self.nodes: dict[int, TreeNode] = {}
        self.root = self._new_node()
        self.root.child_key = b""
        self.root.priority = -(2**63 - 1)  # v0.5.23's -sys.maxsize; every insert raises it (see insert)
        for cd in self.root.data:
            cd.lock_ref = 1
        self.root.data[0].value = self._empty
        self.root.page_hashes = self.root.event_hashes = []
        self.evictable = [0] * n
        self.protected = [0] * n
        self.leaves = EvictableLeafSet()
        self.lru = {c.name: self._new_lru(c, n) for c in self.components if c.uses_lru}
        self.session_refs.reset()
        self.live_receipts: dict[int, IncLockRefResult] = {}  # receipt id -> receipt
        self.lock_groups: dict[tuple, dict[int, IncLockRefResult]] = {}  # the same, filed by lock_group_key
        if self.host_policy is not None:
            self.reset_host_tier()
        if self._touched is not None:
            self._touched.clear()
        if self.kv_events.enabled:
            self.kv_events.all_cleared()

    def _new_lru(self, component: TreeComponent, n: int) -> LRUList:
        """With session refs on, referenced nodes keep to the MRU side (lru_session.py)."""
        if not self.session_radix_cache:
            return LRUList(component.index, n)
        i = component.index
        return PartitionedLRUList(i, n, lambda node: node.data[i].session_ref > 0)

    def take_touched(self) -> set[int]:
        """Ids of the nodes whose state changed since the previous call, for a per-step
        ``check_invariants(cache, touched=...)``: nodes created, split (both parts),
        deleted (and their parents), re-valued or tombstoned; the node a match ended on
        and the one an insert ended on (the LRU refresh moves them and, for SWA, their
        ancestors); and the anchor of every lock, unlock and window release. The checker
        probes each touched node's ancestors too, which covers path and window locks,
        the leaf states they refresh and LRU moves up the path. Recording starts at the
        first call, which returns an empty set; until then each site costs one test."""
        if self._touched is None:
            self._touched = set()
            if self.eviction_policy.name != "lru":
                self.eviction_audit = []
            return set()
        out, self._touched = self._touched, set()
        return out

    def audit_full_victim(self, node: TreeNode) -> None:
        """Record it when Full's walk took a leaf other than the one its policy puts
        first: O(leaves), so only while a checker watches a non-lru policy."""
        full = self.components[0]
        entry = full.heap_entry
        first = min(entry(n) for n in self.leaves if n not in full.passed)
        if first[-1] is not node and first[:-1] < entry(node)[:-1]:
            policy = self.eviction_policy
            self.eviction_audit.append((
                "evict.policy_order", f"Full evicted #{node.id} ({policy.describe(node)}) while #{first[-1].id} "
                f"({policy.describe(first[-1])}) comes first under {policy.label()}"))

    def tick(self) -> float:
        t = self._clock
        self._clock = t + 1.0
        return t

    def new_uuid(self) -> int:
        self._next_uuid += 1
        return self._next_uuid

    def _new_node(self, priority: int = 0) -> TreeNode:
        node = TreeNode(self._next_id, len(self.components), self._clock)
        self._clock += 1.0
        node.creation_time = self._clock
        self._clock += 1.0
        node.priority = priority
        self.nodes[node.id] = node
        self._next_id += 1
        if self._touched is not None:
            self._touched.add(node.id)
        return node

    def node_by_id(self, node_id: int) -> TreeNode:
        node = self.nodes.get(node_id)
        if node is None:
            raise UnknownNodeError(f"node {node_id} is not in the tree (evicted or never existed)")
        return node

    def _child_key_of(self, node: TreeNode):
        return child_key(node.key, 0, self.page_bytes, node.namespace)

    def _set_key(self, node: TreeNode, data: bytes) -> None:
        node.set_key(data)
        node.child_key = child_key(data, 0, self.page_bytes, node.namespace)

    def is_device_leaf(self, node: TreeNode) -> bool:
        """Evictable leaf: has Full KV, no child with Full KV, nothing locked on it."""
        if node is self.root or node.data[0].value is None:
            return False
        for cd in node.data:
            if cd.lock_ref > 0:
                return False
        for child in node.children.values():
            if child.data[0].value is not None:
                return False
        return True

    def update_leaf_state(self, node: TreeNode) -> None:
        if self.is_device_leaf(node):
            self.leaves.add(node)
        else:
            self.leaves.discard(node)

    # ---- match ------------------------------------------------------------
    def match_prefix(self, key: RadixKey) -> MatchResult:
        data = key.data
        ps = self.page_size
        ntok = len(data) // TOKEN_BYTES
        ntok -= ntok % ps
        limit = ntok * TOKEN_BYTES
        root = self.root
        if limit == 0:
            if self.events.enabled:
                emit_verdicts(self, key, root, None)
            return MatchResult(self._empty, root.id, root.id, root.id)
        if limit != len(data):
            data = data[:limit]
        validators = []  # loops, not comprehensions, on this hot path: cheaper on short walks
        for component in self.components:
            if (validate := component.create_match_validator()) is not None:
                validators.append(validate)
        path, cut = walk_key(root, data, key.namespace, ps)
        split_child = None  # the node a partial match split (for the verdict)
        # the key left the last node part-way: split it there now, before the
        # validators run (they read only the nodes they are handed)
        if cut is not None:
            split_child = path[-1]
            path[-1] = self._split_node(split_child, cut)
        node = path[-1] if path else root
        if self.host_policy is not None:  # host copies count: tree_core_host.py
            result = self.host_match(path, node)
            if self.events.enabled:
                emit_verdicts(self, key, node, split_child)
            return result
        chunks: list[torch.Tensor] = []
        walked = 0
        if validators:
            best, best_chunks = root, 0
            for child in path:
                walked += child.length
                chunks.append(child.data[0].value)
                ok = True
                for validate in validators:  # every one sees every node: they keep state
                    if not validate(child, child.length):
                        ok = False
                if ok:
                    best, best_chunks = child, len(chunks)
            del chunks[best_chunks:]
        else:
            for child in path:
                walked += child.length
                chunks.append(child.data[0].value)
            best = node
        result = self._finish_match(best, chunks, walked, node)
        if self.events.enabled:  # after the match end's PROMOTE, so it stays the step's first named node
            emit_verdicts(self, key, node, split_child)
        return result

    def peek_match(self, key: RadixKey) -> list[tuple[TreeNode, int]]:
        """Read-only twin of match_prefix: the path a match would lock, as (node,
        tokens of it matched), root excluded, ending at the best node. Splits nothing
        and touches no access time, so callers can check capacity first."""
        data = key.data
        ps = self.page_size
        ntok = len(data) // TOKEN_BYTES
        limit = (ntok - ntok % ps) * TOKEN_BYTES
        data = data[:limit]
        validators = [v for c in self.components if (v := c.create_match_validator()) is not None]
        nodes, cut = walk_key(self.root, data, key.namespace, ps)
        path = [(node, node.length) for node in nodes]
        if cut is not None:
            path[-1] = (nodes[-1], cut)
        if self.host_policy is not None:  # the device prefix ends at the first host-only node
            path = list(itertools.takewhile(lambda step: step[0].data[0].value is not None, path))
        if not validators:
            return path
        best = 0
        for k, (child, plen) in enumerate(path, 1):
            ok = True
            for validate in validators:
                if not validate(child, plen):
                    ok = False
            if ok:
                best = k
        del path[best:]
        return path

    def _finish_match(self, best: TreeNode, chunks: list, walked: int, last_visited: TreeNode,
                      device: Optional[TreeNode] = None, host_hit: int = 0) -> MatchResult:
        for hook in self._match_end_hooks:
            hook(best)
        if self._touched is not None:
            self._touched.add(best.id)
        # MRU bump; each parent slightly older than its child so deeper leaves go first
        t = self.tick()
        node = best
        while node is not None:
            node.last_access_time = t
            t -= 1e-5
            node = node.parent
        if self.events.enabled and best is not self.root:
            self.events.emit(EventKind.PROMOTE, "full", best.id, Cause.REQUEST, 0, "access time, path to root")
        if not chunks:
            indices = self._empty
        elif len(chunks) == 1:
            indices = chunks[0]
        else:
            indices = torch.cat(chunks)
        root_id = self.root.id
        result = MatchResult(
            indices,
            best.id if device is None else device.id,
            best.id,
            best.id,
            host_hit,
            full_kv_hit_length=walked,
            last_visited_node_id=None if last_visited.id == root_id else last_visited.id,
        )
        for component in self._finalizers:
            result = component.finalize_match_result(result, best, walked)
        return result

    # ---- insert -----------------------------------------------------------
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
            root.priority = priority  # host-only node fetched below it inherits (tree_core_prefetch.py)
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

    # ---- page hashes ----------------------------------------------------------------
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

    # ---- component values (eviction itself: tree_core_evict.py) -----------------
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

    def split_node(self, node: TreeNode, split_len: int) -> TreeNode:
        """Components' entry to a split (e.g. at an SWA window boundary)."""
        return self._split_node(node, split_len)

    # ---- sizes --------------------------------------------------------------
    def evictable_size(self, name: str = "full") -> int:
        return self.evictable[self.by_name[name].index]

    def protected_size(self, name: str = "full") -> int:
        return self.protected[self.by_name[name].index]

    def path_device_indices(self, node_id: int) -> torch.Tensor:
        """Full slots from the root down to the end of ``node_id``."""
        node = self.node_by_id(node_id)
        chunks = []
        while node is not self.root:
            chunks.append(node.data[0].value)
            node = node.parent
        if not chunks:
            return self._empty
        chunks.reverse()
        return chunks[0] if len(chunks) == 1 else torch.cat(chunks)

    def iter_nodes(self):
        """Depth-first, children ordered by their first token (root first)."""
        stack = [self.root]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(self.iter_children(node)))

    @staticmethod
    def iter_children(node: TreeNode) -> list[TreeNode]:
        """Children ordered by (namespace, first page)."""
        return sorted(node.children.values(), key=_child_order)
