"""The tree core: one radix tree, per-component data on each node, assembled here.

It matches (here), inserts and splits (insert.py), evicts (cascade.py) and locks
(locks.py), asking the components what each phase means for their data; the host
tier's steps join it from host_copies.py, host_eviction.py, host_load.py and
prefetch_placement.py. It never touches a pool: slots to free come back as deferred
actions (insert) or per-component free lists (eviction) that the controller executes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Optional

import torch

from ..basics.base_component import FULL
from ..basics.errors import UnknownNodeError
from ..basics.keys import TOKEN_BYTES, RadixKey, namespace_order, unpack_tokens
from ..basics.params import DecLockRefParams, IncLockRefResult, MatchResult, match_field_position, tree_match_result
from ..observe.events import Cause, EventBus, EventKind
from ..observe.kv_events import KVEventRecorder
from ..observe.metrics import CacheMetrics
from .cascade import TreeEviction
from .component_api import FullComponentAPI, TreeComponentAPI, WindowLockAPI
from .hooks import overriding
from .host_copies import TreeHostTier
from .host_eviction import TreeHostEviction
from .host_load import TreeHostLoad
from .insert import TreeInsert
from .leaf_policies import EvictionPolicy
from .leaf_set import EvictableLeafSet
from .locks import TreeLocks
from .lru import LRUList
from .match_verdicts import emit_verdicts
from .node import TreeNode
from .prefetch_placement import TreePrefetch
from .session_lru import PartitionedLRUList
from .session_refs import SessionRefTracker
from .walk import accepted, walk_key


def _child_order(node: TreeNode):
    """(namespace, first page): a total order, since siblings differ in their first page."""
    page = node.child_key if isinstance(node.child_key, bytes) else node.child_key[1]
    return (namespace_order(node.namespace), unpack_tokens(page))


class UnifiedTreeCore(TreeInsert, TreeEviction, TreeHostEviction, TreeHostLoad, TreeHostTier, TreePrefetch):
    """One radix tree shared by ``components`` (Full first). The step mixins share its
    state; the lock receipts (``locks``) and session tags (``session_refs``) are
    collaborators that own theirs."""

    def __init__(self, components: list[TreeComponentAPI], page_size: int, device: torch.device, events: EventBus,
                 session_radix_cache: bool = False, eviction_policy: Optional[EvictionPolicy] = None,
                 metrics: Optional[CacheMetrics] = None,
                 slots_in_pool: Callable[[torch.Tensor], bool] = lambda slots: True):
        if not components or components[0].name != FULL:
            raise ValueError("the first component must be 'full'")
        self.components = components
        self.by_name = {c.name: c for c in components}
        self.page_size = page_size
        self.page_bytes = page_size * TOKEN_BYTES
        self.device = device
        self.events = events
        self.metrics = CacheMetrics() if metrics is None else metrics  # a match counts its hits where it is made
        self.slots_in_pool = slots_in_pool  # an insert's value lies in the Full pool (the controller's range check)
        for component in components:
            component.tree = self
        # each hook list holds only the components whose class overrides it (hooks.py)
        self._walkdown_hooks = [c.on_walkdown for c in overriding(components, "on_walkdown")]
        self._match_end_hooks = [c.on_match_end for c in overriding(components, "on_match_end")]
        self._insert_end_hooks = [c.on_insert_end for c in overriding(components, "on_insert_end")]
        self._overlap_hooks = overriding(components, "on_insert_overlap")
        self._commit_hooks = overriding(components, "commit_insert")
        self._finalizers = overriding(components, "finalize_match_result")
        self._host_finalizers = overriding(components, "finalize_host_match")  # only while a host tier is on
        # the components' *_branching_seqlen fields, set as the result is built
        self._branch_grids = tuple((match_field_position(c.branching_field), c.branching_grid)
                                   for c in components if c.branching_field is not None)
        self._validating = overriding(components, "create_match_validator")  # those that may refuse a node
        self._empty = torch.empty(0, dtype=torch.int64, device=device)
        self._touched: Optional[set[int]] = None  # recording for take_touched (off until asked)
        self.eviction_policy = eviction_policy or EvictionPolicy()  # Full's leaf order (leaf_policies.py)
        self.tlru_bookkeeping = self.eviction_policy.reads_branch_depth  # the per-node depths TLRU reads
        # while a checker watches (take_touched is on) and the policy is not plain LRU: each Full victim
        # compared with the policy's first leaf; what disagreed waits for the next check
        self.eviction_audit: Optional[list[tuple[str, str]]] = None
        self.session_radix_cache = session_radix_cache  # session refs (session_refs.py)
        self.session_refs = SessionRefTracker(self, session_radix_cache)
        self.locks = TreeLocks(self)  # the held lock receipts (locks.py)
        self.page_hashing = False  # a hash chain on every node (page_hash.py): on with storage or KV events
        self.kv_events = KVEventRecorder(self)  # SGLang's KV event stream (kv_events.py), off by default
        self.reset()

    # ---- state ------------------------------------------------------------
    def reset(self) -> None:
        n = len(self.components)
        self._clock = 1.0
        self._next_id = 0
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
        self.locks.reset()
        if self.host_policy is not None:
            self.reset_host_tier()
        if self._touched is not None:
            self._touched.clear()
        if self.kv_events.enabled:
            self.kv_events.all_cleared()

    def _new_lru(self, component: TreeComponentAPI, n: int) -> LRUList:
        """With session refs on, referenced nodes keep to the MRU side (session_lru.py)."""
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
            if not self.eviction_policy.plain_lru:
                self.eviction_audit = []
            return set()
        out, self._touched = self._touched, set()
        return out

    def audit_full_victim(self, node: TreeNode) -> None:
        """Record it when Full's walk took a leaf other than the one its policy puts
        first: O(leaves), so only while a checker watches a non-lru policy."""
        full: FullComponentAPI = self.components[0]
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
        key_len = len(data) // TOKEN_BYTES
        ntok = key_len - key_len % ps
        limit = ntok * TOKEN_BYTES
        root = self.root
        if limit == 0:
            if self.events.enabled:
                emit_verdicts(self, key, root, None)
            self.metrics.count_match(key_len, 0, 0)
            return MatchResult(self._empty, root.id, root.id, root.id)
        if limit != len(data):
            data = data[:limit]
        validators = []  # loops, not comprehensions, on this hot path: cheaper on short walks
        for component in self._validating:
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
        if self.host_policy is not None:  # host copies count: host_load.py
            result = self.host_match(path, node, key_len)
            if self.events.enabled:
                emit_verdicts(self, key, node, split_child)
            return result
        chunks: list[torch.Tensor] = []
        walked = 0
        if validators:
            best, best_chunks, kept = root, 0, 0
            for child in path:
                walked += child.length
                chunks.append(child.data[0].value)
                if accepted(validators, child):
                    best, best_chunks, kept = child, len(chunks), walked
            del chunks[best_chunks:]
        else:
            for child in path:
                walked += child.length
                chunks.append(child.data[0].value)
            best, kept = node, walked
        result = self._finish_match(best, chunks, walked, node, key_len, kept)
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

    def _finish_match(self, best: TreeNode, chunks: list, walked: int, last_visited: TreeNode, key_len: int,
                      kept: int, device: Optional[TreeNode] = None, host_hit: int = 0) -> MatchResult:
        """The match's result and its side effects (LRU refresh, access times, counts).
        ``kept``: the tokens of the device prefix, summed from the nodes' lengths so that
        nothing here asks a tensor its size (a cold torch call costs ~2 µs)."""
        if best is not self.root:  # a match that kept nothing refreshes nothing
            for hook in self._match_end_hooks:
                hook(best)
        if self._touched is not None:
            self._touched.add(best.id)
        # MRU bump; each parent slightly older than its child so deeper leaves go first
        t = self._clock  # self.tick(), inlined on this hot path
        self._clock = t + 1.0
        node = best
        while node is not None:
            node.last_access_time = t
            t -= 1e-5
            node = node.parent
        if self.events.enabled and best is not self.root:
            self.events.emit(EventKind.PROMOTE, FULL, best.id, Cause.REQUEST, 0, "access time, path to root")
        if not chunks:
            indices = self._empty
        elif len(chunks) == 1:
            indices = chunks[0]
        else:
            indices = torch.cat(chunks)
        last = last_visited.id
        result = tree_match_result(indices, best.id if device is None else device.id, best.id, host_hit, walked,
                                   None if last == self.root.id else last, kept, self._branch_grids)
        if self.host_policy is not None:
            for component in self._host_finalizers:
                result = component.finalize_host_match(result, best)
        for component in self._finalizers:
            result = component.finalize_match_result(result, best, walked, kept + host_hit)
        self.metrics.count_match(key_len, kept, host_hit)
        return result

    # ---- locks (the receipts are TreeLocks', locks.py) ---------------------------
    def inc_lock_ref(self, node_id: int, skip: tuple[str, ...] = (), host_only: bool = False) -> IncLockRefResult:
        return self.locks.inc_lock_ref(node_id, skip, host_only)

    def dec_lock_ref(self, node_id: int, params: DecLockRefParams | IncLockRefResult, skip_swa: bool = False) -> None:
        self.locks.dec_lock_ref(node_id, params, skip_swa)

    def dec_window_lock(self, node_id: int, params, batch) -> None:
        self.locks.dec_window_lock(node_id, params, batch)

    def held_lock_groups(self) -> dict[tuple, dict[int, object]]:
        return self.locks.held_lock_groups()

    def releases(self, component: TreeComponentAPI, params, skip_swa: bool) -> bool:
        return self.locks.releases(component, params, skip_swa)

    @property
    def window_component(self) -> Optional[WindowLockAPI]:
        return self.locks.window_component

    @property
    def live_receipts(self) -> dict[int, IncLockRefResult]:
        return self.locks.live_receipts

    @property
    def lock_groups(self) -> dict[tuple, dict[int, IncLockRefResult]]:
        return self.locks.held_lock_groups()

    # ---- sizes --------------------------------------------------------------
    def evictable_size(self, name: str = FULL) -> int:
        return self.evictable[self.by_name[name].index]

    def protected_size(self, name: str = FULL) -> int:
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
