"""The component hook interface.

A component owns one kind of cache data on the shared tree (Full KV, SWA KV, Mamba
state). The tree core walks, splits, evicts and locks; at each phase it asks every
component what to do through the hooks below. Defaults describe "no opinion", so a new
component overrides only the phases it cares about; the no-op defaults are marked
``default_hook``, and such a hook runs only for the components that override it
(tree/hooks.py).

Hooks by phase:
  config   config_fields (its own [config] fields, read with config_value)
  match    create_match_validator, match_verdict, branching_field / branching_grid,
           finalize_match_result, finalize_host_match, finalize_match_in_cache
  LRU      on_walkdown, on_match_end, on_insert_end
  insert   check_insert_params, on_insert_overlap, commit_insert
  split    redistribute_on_split
  evict    eviction_priority, evict_component, evict_start / evict_next / evict_end
  lock     acquire_lock, check_release, release_lock
  caching  caching_len, prepare_for_caching_req, floor_cache_len, free_out_of_window_slots,
           cleanup_after_caching_req, slide_window
  pools    free_device_values, apply_action (run by the controller, never the tree);
           a component with its own pool also answers available_size, pool_size,
           reset_pool, pool_views; a pool that follows Full KV slot for slot sets
           ``kv_peer`` and implements the peer_* hooks
  inspect  node_has_component_data, value_len, node_extras, request_extras
A component's invariants and match proof are its checks module's (see the registry).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, Optional

import torch

from ..basics.limits import MAX_POOL
from ..observe.events import Cause, EventKind
from ..tree.component_api import default_hook
from ..tree.session_refs import session_evict_next

if TYPE_CHECKING:
    from .cache_view import CacheView
    from ..observe.eviction_batch import EvictionBatch
    from ..basics.params import DecLockRefParams, IncLockRefResult, InsertParams, InsertResult, MatchResult
    from ..tree.core import UnifiedTreeCore
    from ..tree.node import TreeNode


class TreeComponent:
    name = ""  # the registry name (components/__init__.py)
    uses_lru = False  # keeps a per-component LRU list in the tree core
    kv_peer = False  # allocated and freed along with Full KV slots (SWA)
    leaf_priority = 0
    internal_priority = 0
    # Capabilities the flows and the other components ask for instead of names:
    has_window_lock = False  # a lock part release_window lets go early (SWA's window)
    sets_checkpoints = False  # caching stops at this component's own boundaries (Mamba states)
    prompt_split_ok = True  # a finished request's leaf may be split at its prompt's end
    keeps_retraction_window = False  # a retraction backup keeps its trailing window (SWA)
    refuses_retraction_backup = False  # SGLang backs up no retracted request holding it (Mamba)
    # What a session's frontier node holds with the session radix cache on (session_refs.py):
    # "path" (Full), "window" (SWA), or "node", the default: that node only, as Mamba's state.
    session_coverage = "node"
    # SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK: a checkpoint's re-lock leaves this component out
    skips_decode_lock = False
    # The MatchResult field where a match says how far a new branch shares this component's
    # data (SWA's and Mamba's *_branching_seqlen): the walked tokens rounded down to
    # ``branching_grid`` (params.tree_match_result); None: this component reports none.
    branching_field: Optional[str] = None
    branching_grid = 1
    # This component's own [config] fields -> default (None: required), positive ints
    # unless check_config_value says otherwise, named "<component>_<field>"; CacheConfig
    # keeps them in ``extra``.
    config_fields: ClassVar[dict[str, object]] = {}
    # For the config reference (config_reference.py), a field it does not list itself:
    # field -> (the default as printed, who turns it on, what it does)
    config_docs: ClassVar[dict[str, tuple[str, str, str]]] = {}

    def __init__(self, cache: CacheView, index: int) -> None:
        self.cache = cache  # for pool I/O in the controller-side hooks only
        self.index = index
        self.tree: UnifiedTreeCore = None  # set by the tree core

    def config_value(self, field: str) -> int:
        """One of ``config_fields`` from the cache's config: given, or its default."""
        default = self.config_fields[field]
        return self.check_config_value(field, self.cache.config.extra.get(field, default))

    def check_config_value(self, field: str, value):
        """A config field's value, checked (the default rule: a positive int, None when
        required and not given); a component whose option is a flag or may be off
        overrides this for that field and returns the value it resolves to."""
        if value is None:
            raise ValueError(f"{field} (a positive int) is required when {self.name!r} is a component")
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{field} must be a positive int (got {value!r})")
        if value > MAX_POOL:
            raise ValueError(f"{field} {value} is larger than this workbench supports ({MAX_POOL:,}: its pools are "
                             "allocated whole)")
        return value

    # ---- inspection -------------------------------------------------------
    def node_has_component_data(self, node: TreeNode) -> bool:
        return node.data[self.index].value is not None

    def value_len(self, node: TreeNode) -> int:
        """Units this component counts for a node (tokens, or 1 for a state slot)."""
        return node.length

    def create_host_match_validator(self):
        """With a host tier: accepts a node whose data is on either tier (default: the
        device validator, for a component that keeps no host copy)."""
        return self.create_match_validator()

    @default_hook
    def node_extras(self, node: TreeNode) -> dict:
        """Component-private facts the snapshot shows (e.g. a lock boundary)."""
        return {}

    @default_hook
    def request_extras(self, req) -> dict:
        """This component's state for one running request, as plain values, for the
        inspection snapshot (``RequestView.components``): a component that keeps
        request state (in ``req.component_state`` or its own fields) shows it here.
        Runs after every observed step: O(1), no tensors in the result."""
        return {}

    # ---- match ------------------------------------------------------------
    @default_hook
    def create_match_validator(self) -> Optional[Callable[[TreeNode, int], bool]]:
        """A fresh (possibly stateful) predicate per match, called as
        ``validate(node, matched_tokens)`` on every node in path order; None means
        'always valid'."""
        return None

    def match_verdict(self, path: list[TreeNode]) -> Optional[tuple[int, str]]:
        """For an observed match's walked ``path`` (root excluded): the deepest index
        this component accepts as a match end (-1: the root) and a short clause saying
        why it stops there; None when it does not validate matches."""
        validate = self.create_match_validator()
        if validate is None:
            return None
        best = -1
        for k, node in enumerate(path):
            if validate(node, node.length):
                best = k
        if best == len(path) - 1:
            return best, "its validator accepts the walk's end"
        return best, f"its validator refuses node #{path[best + 1].id} and every node below"

    @default_hook
    def pinned_by_lock(self, path: list[tuple[TreeNode, int]]) -> int:
        """Evictable units a lock at the end of ``path`` would protect (for capacity
        checks made before a request locks its prefix)."""
        return 0

    @default_hook
    def finalize_match_result(self, result: MatchResult, best: TreeNode, walked: int, boundary: int) -> MatchResult:
        """The result with this component's fields; ``walked``: the key's tokens the walk
        matched, ``boundary``: the device prefix and host hit the result reports."""
        return result

    @default_hook
    def finalize_host_match(self, result: MatchResult, best: TreeNode) -> MatchResult:
        """With a host tier only: the result with this component's host fields (what a
        load-back would bring for a match ending at ``best``)."""
        return result

    @default_hook
    def finalize_match_in_cache(self, params, result: MatchResult) -> MatchResult:
        return result

    # ---- LRU refresh (LRUEvictionMixin has the usual ones) ------------------
    @default_hook
    def on_walkdown(self, node: TreeNode) -> None:
        """A walk passed ``node``. Run only for components that override it."""

    @default_hook
    def on_match_end(self, node: TreeNode) -> None:
        """A match ended at ``node`` (never the root: a match that kept nothing refreshes nothing)."""

    @default_hook
    def on_insert_end(self, node: TreeNode) -> None:
        """An insert ended at ``node``."""

    # ---- insert -----------------------------------------------------------
    @default_hook
    def check_insert_params(self, params: InsertParams) -> None:
        """Refuse (InvalidValueError) before the walk what this component cannot insert,
        so a bad value never leaves half an insert."""

    @default_hook
    def on_insert_overlap(
        self,
        node: TreeNode,
        prefix_len: int,
        total_prefix_len: int,
        value: torch.Tensor,
        params: InsertParams,
        result: InsertResult,
        actions: list,
    ) -> int:
        """Return the offset (within the node) from which this component took the
        incoming slots; the rest up to ``prefix_len`` are freed as duplicates."""
        return prefix_len

    @default_hook
    def commit_insert(
        self, node: TreeNode, is_new_leaf: bool, params: InsertParams, result: InsertResult, actions: list
    ) -> None:
        pass

    # ---- split ------------------------------------------------------------
    @default_hook
    def redistribute_on_split(self, new_parent: TreeNode, child: TreeNode) -> None:
        """Share ``child``'s data with the new upper node ``new_parent`` (which starts
        empty: no value, no lock). By default everything stays on the deeper node."""

    # ---- eviction ---------------------------------------------------------
    def eviction_priority(self, is_leaf: bool) -> int:
        """Higher is evicted later; evicting a trigger cascades to every component
        whose priority on that node is <= the trigger's."""
        return self.leaf_priority if is_leaf else self.internal_priority

    def evict_component(self, node: TreeNode, batch: EvictionBatch) -> int:
        """Hand this component's device data on ``node`` to ``batch`` (``batch.free``)
        and fix the counters. Returns units freed. The tree core clears ``value`` and
        the LRU."""
        raise NotImplementedError

    def evict_start(self, request: int) -> None:
        self._evict_request = request

    def evict_next(self, batch: EvictionBatch) -> tuple[Optional[TreeNode], bool]:
        """One eviction step: a leaf for the controller to delete whole, or None with
        ``progress`` True after tombstoning inline (into ``batch``), or (None, False)
        when done (``batch.counts`` says how much this walk freed so far)."""
        return None, False

    @default_hook
    def pass_by(self, node: TreeNode) -> None:
        """The controller kept ``node``, this walk's victim, on the device (write-back
        declined to drop it): the walk must not offer it again. A cursor walk has
        already moved past it."""

    @default_hook
    def evict_end(self) -> None:
        pass

    # ---- locks ------------------------------------------------------------
    @default_hook
    def acquire_lock(self, node: TreeNode, receipt: IncLockRefResult) -> None:
        """Take this component's share of a lock anchored on ``node`` (default: none).
        Never asked for the root, which holds no data: a lock there takes nothing."""

    @default_hook
    def locked_nodes(self, node: TreeNode, receipt) -> list:
        """The nodes a held receipt keeps locked for this component (for the checker)."""
        return []

    @default_hook
    def check_release(self, node: TreeNode, receipt: DecLockRefParams) -> Optional[str]:
        """Why releasing would corrupt state (checked before anything changes), or None."""
        return None

    @default_hook
    def release_lock(self, node: TreeNode, receipt: DecLockRefParams) -> None:
        """Undo exactly what ``acquire_lock`` took for this receipt."""

    # ---- request caching (controller side) --------------------------------
    @default_hook
    def prepare_for_caching_req(self, req, params: InsertParams, length: int, finished: bool) -> Optional[int]:
        """Optionally cap how many tokens of the request get cached."""
        return None

    @default_hook
    def caching_len(self, req, length: int, finished: bool) -> Optional[int]:
        """The same cap as ``prepare_for_caching_req``, read-only: a checkpoint SGLang
        would assert on is refused before any component changes anything."""
        return None

    @default_hook
    def checkpoint_seqlen(self, req) -> Optional[int]:
        """Where this component's newest state checkpoint of a running request lies
        (a later match can end there), or None: SWA keeps its window behind it."""
        return None

    @default_hook
    def floor_cache_len(self, length: int) -> int:
        """Round the agreed cache length down to what this component can key (v0.5.23:
        identity for Full, SWA and Mamba)."""
        return length

    @default_hook
    def free_out_of_window_slots(self, req, pre_len: int, params: InsertParams) -> None:
        """Before caching an unfinished request: drop what it no longer needs."""

    @default_hook
    def slide_window(self, req, pre_len: int) -> int:
        """Decode moved on: free what the request no longer needs before ``pre_len``
        (units freed)."""
        return 0

    @default_hook
    def cleanup_after_caching_req(self, req, finished: bool, result: Optional[InsertResult], params=None) -> None:
        pass

    @default_hook
    def reserve_request(self, req) -> None:
        """Take this component's own slots for a new request ahead of its match (the
        pool has them free), so nothing is left to fail once the match has run."""

    @default_hook
    def admit_request(self, req) -> None:
        """A request was admitted (prefix matched and locked, the rest computed)."""

    @default_hook
    def advance_request(self, req, start: int) -> None:
        """A running request computed tokens [start, kv_len)."""

    @default_hook
    def release_request(self, req) -> None:
        """A request is dropped without caching: return what it holds."""

    @default_hook
    def slots_for_request(self) -> int:
        """Slots of this component's own pool a new request takes."""
        return 0

    # ---- pools (controller side) ------------------------------------------
    @default_hook
    def pool_views(self) -> dict:
        """name -> PoolView of this component's own pool (none by default)."""
        return {}

    def free_device_values(self, values: list[torch.Tensor], cause: Cause, node: Optional[int]) -> None:
        raise NotImplementedError

    def apply_action(self, action) -> None:
        raise AssertionError(f"{self.name}: unknown action {action!r}")

    # ---- Full-KV peers (controller side; only when kv_peer) -----------------
    @default_hook
    def peer_shortfall(self, num_tokens: int) -> int:
        """Slots this pool lacks for ``num_tokens`` new Full slots."""
        return 0

    @default_hook
    def peer_alloc(self, full_slots: torch.Tensor) -> None:
        pass

    @default_hook
    def peer_continue(self, last_slot: torch.Tensor, full_slots: torch.Tensor) -> None:
        """Map Full slots that fill the rest of an already allocated page."""

    @default_hook
    def peer_free(self, full_slots: torch.Tensor, cause: Cause, node: Optional[int]) -> None:
        pass

    @default_hook
    def peer_write(self, full_slots: torch.Tensor, fingerprints) -> None:  # fingerprints: a tensor or a host array
        pass

    # ---- helpers shared by components -------------------------------------
    def _move_to_protected(self, node: TreeNode) -> int:
        n = self.value_len(node)
        self.tree.evictable[self.index] -= n
        self.tree.protected[self.index] += n
        return n

    def _move_to_evictable(self, node: TreeNode) -> int:
        n = self.value_len(node)
        self.tree.evictable[self.index] += n
        self.tree.protected[self.index] -= n
        return n

    def _emit(self, kind: EventKind, node: Optional[TreeNode], cause: Cause, tokens: int = 0, detail: str = "") -> None:
        bus = self.tree.events
        if bus.enabled:
            bus.emit(kind, self.name, None if node is None else node.id, cause, tokens, detail)


class LRUEvictionMixin:
    """A component's own LRU list (``uses_lru``): walks and matches refresh the nodes
    holding its data, and eviction takes the least recent unlocked first: an
    evictable leaf is handed to the controller to delete whole (every component's
    data goes), anything else is tombstoned in place with the cascade. One mutation
    per step, so allocation-driven eviction can re-check the pools between steps. A
    component whose walks must not refresh sets ``on_walkdown = TreeComponent.on_walkdown``."""

    _session_walk = False  # this walk uses the session-partitioned list's cursor

    def on_walkdown(self, node: TreeNode) -> None:
        lru = self.tree.lru[self.name]
        if node.data[self.index].value is not None and node in lru:
            lru.promote(node)

    def on_match_end(self, node: TreeNode) -> None:
        i = self.index
        self.tree.lru[self.name].promote_path(node, self.tree.root, lambda n: n.data[i].value is not None)

    def evict_start(self, request: int) -> None:
        self._evict_request = request
        lru = self.tree.lru[self.name]
        self._session_walk = getattr(lru, "partitioned", False)
        if self._session_walk:  # the session-partitioned list walks with its cursor
            lru.cursor_begin()
            self._cursor = lru.cursor_next()
            return
        self._cursor = lru.lru_first()

    def evict_next(self, batch):
        if self._session_walk:
            return session_evict_next(self, batch)
        lru = self.tree.lru[self.name]
        if self._cursor is not None and self._cursor not in lru:
            self._cursor = lru.lru_first()  # the previous step removed it: restart
        x = self._cursor
        if batch.counts[self.name] >= self._evict_request or x is None:
            return None, False
        self._cursor = lru.prev_of(x)
        if x.in_leaf_set:
            return x, True
        self.tree.tombstone(x, self, batch)
        return None, True

    def evict_end(self) -> None:
        if self._session_walk:
            self.tree.lru[self.name].cursor_end()
            self._session_walk = False
        self._cursor = None
