"""``UnifiedRadixCache``: the controller. It owns the pools, asks the tree core for
decisions and executes them (allocations, frees, copies); the scheduler's request
flows, the tiers' and the sessions' calls it inherits live in the rooms below, each
reading it by the protocol in that room's owner.py.

Public names follow SGLang (match_prefix, insert, evict, evict_for_alloc,
inc_lock_ref, dec_lock_ref, release_kv_cache, checkpoint) so cache
engineers can read a scenario as they would read scheduler code.
"""

from __future__ import annotations

import itertools
from typing import Optional

import torch

from ..basics.base_component import FULL
from ..basics.evict_fields import result_fields
from ..observe.actions import BackupKV, ComponentAction, FreeDeviceKV
from ..components import COMPONENT_REGISTRY
from ..config.cache_config import CacheConfig
from ..tree.leaf_policies import make_policy
from ..basics.device import resolve_device
from ..basics.errors import CacheError, InvalidValueError, PoolError, PoolExhaustedError
from ..observe.events import Cause, EventBus, EventKind
from ..tree.hooks import HookTable
from ..basics.keys import RadixKey, as_key
from ..basics.params import (
    DecLockRefParams,
    EvictParams,
    EvictResult,
    IncLockRefResult,
    InsertParams,
    InsertResult,
    MatchPrefixParams,
    MatchResult,
)
from ..tiers.calls import HostCalls, StorageCalls
from ..tiers.host import HostTier
from ..pools import KVFingerprintBuffer, PagedAllocator, prefix_hashes
from ..basics.request import Req
from ..requests.flows import RequestFlows
from ..requests.load_back import RequestLoadBack
from ..requests.retraction import RequestRetraction
from ..sessions.controller import SessionCalls, SessionController
from ..observe.metrics import CacheMetrics
from ..tree.core import UnifiedTreeCore


class UnifiedRadixCache(RequestFlows, RequestLoadBack, RequestRetraction, HostCalls, StorageCalls, SessionCalls):
    def __init__(self, config: Optional[CacheConfig] = None, **kwargs) -> None:
        self.config = config if config is not None else CacheConfig.of(**kwargs)
        cfg = self.config
        self.device = resolve_device(cfg.device)
        self.page_size = cfg.page_size
        self.auto_evict = cfg.auto_evict
        self.bigram_keys = cfg.bigram_keys  # EAGLE's token-pair keys (CacheConfig.is_eagle)
        self.events = EventBus()
        self.metrics = CacheMetrics()  # hits, misses, evictions and tier traffic (metrics.py)
        self.kv_pool = PagedAllocator(cfg.kv_size, cfg.page_size, self.device, FULL)
        self.kv_buffer = KVFingerprintBuffer(cfg.kv_size, self.device)
        self.components = [COMPONENT_REGISTRY[name](self, i) for i, name in enumerate(cfg.components)]
        self.by_name = {c.name: c for c in self.components}
        _check_component_fields(self.components, cfg.extra)
        self.tree = UnifiedTreeCore(self.components, cfg.page_size, self.device, self.events, cfg.session_radix_cache,
                                    make_policy(cfg.eviction_policy, cfg.eviction_policy_config), self.metrics,
                                    self.kv_pool.holds_ids)
        if cfg.enable_kv_cache_events:  # on from the start: SGLang's construction reset clears the router
            self.tree.kv_events.enable()
            self.tree.kv_events.all_cleared()
        self.session_refs = self.tree.session_refs  # generations, closes, leaf indexes (tree/session_refs.py)
        self.host = HostTier(self, cfg.hicache) if cfg.hicache is not None else None  # HiCache's host tier
        self.hooks = HookTable.of(self.components)  # which components each hook runs on
        self.requests: dict[str, Req] = {}
        self.retracted: dict[str, Req] = {}  # retracted requests (requests/retraction.py)
        self.session_controller = SessionController()  # the scheduler's sessions (sessions/controller.py)
        self.session_slots: dict = {}  # streaming sessions' records and locks (sessions/streaming.py)
        self._rids = itertools.count(1)
        self.fingerprints = True  # write_kv records KV fingerprints (off only for timing replays)
        self.fault_hits: dict[str, int] = {}  # fault name -> times it changed behaviour (cache/faults)
        if cfg.faults:
            from ..faults import install_faults

            install_faults(self, cfg.faults)

    def new_rid(self) -> str:
        """A fresh id for a request admitted without one ("req1", "req2", ...)."""
        return f"req{next(self._rids)}"

    # ---- match / insert -------------------------------------------------------
    def match_prefix(self, params: MatchPrefixParams | RadixKey) -> MatchResult:
        if not isinstance(params, MatchPrefixParams):
            params = MatchPrefixParams(as_key(params))
        if params.cow_mamba and params.req is None:
            raise InvalidValueError("cow_mamba needs the request that receives the copy (params.req)")
        if self.bigram_keys:  # EAGLE: the tree keys token pairs (keys.RadixKey.bigram_view)
            params.key = params.key.bigram_view()
        if not self.events.enabled:  # (no scope to enter while nobody listens, as the lock calls)
            return self._match(params)
        with self.events.op("match_prefix"):
            return self._match(params)

    def _match(self, params: MatchPrefixParams) -> MatchResult:
        result = self.tree.match_prefix(params.key)
        for component in self.hooks.finalize_match_in_cache:
            result = component.finalize_match_in_cache(params, result)
        return result  # (its hits were counted by the tree, which knows them without asking a tensor)

    def insert(self, params: InsertParams) -> InsertResult:
        if type(params.key) is not RadixKey:
            params.key = as_key(params.key)
        if self.bigram_keys and not params.key.is_bigram:
            # EAGLE: N tokens make N - 1 pairs; the value is cut to match (its last slot stays the caller's)
            params.key = params.key.bigram_view()
            if isinstance(params.value, torch.Tensor) and params.value.dim() == 1:
                params.value = params.value[: len(params.key)]
        if params.prev_prefix_len < 0:
            raise CacheError(f"prev_prefix_len must be >= 0 (got {params.prev_prefix_len})")
        floor = params.swa_evicted_seqlen
        if floor != 0 and (type(floor) is not int or floor < 0 or floor % self.page_size):
            raise InvalidValueError(f"swa_evicted_seqlen must be a non-negative multiple of page_size {self.page_size} (got {floor!r})")
        for component in self.hooks.check_insert_params:
            component.check_insert_params(params)
        with self.events.op("insert"):
            try:
                return self.tree.insert(params, self._apply_actions)
            finally:
                if self.host is not None:
                    self.host.end_of_op()

    def _apply_actions(self, actions: list) -> None:
        bus = self.events
        for action in actions:
            if bus.enabled:
                bus.emit(EventKind.ACTION, action.component, action.node, action.cause, action.tokens, action.describe())
            if isinstance(action, FreeDeviceKV):  # FreeDeviceKVFullOnly too; the insert's slots, range checked
                self.free_kv(action.values, action.cause, action.node, full_only=action.full_only, trusted=True)
            elif isinstance(action, BackupKV):
                self.host.backup(action.nodes)
            elif isinstance(action, ComponentAction):
                self.by_name[action.component].apply_action(action)
            else:
                raise AssertionError(f"unknown action {action!r}")

    # ---- pools ----------------------------------------------------------------
    def free_kv(
        self, values: list[torch.Tensor], cause: Cause = Cause.REQUEST, node: Optional[int] = None,
        full_only: bool = False, trusted: bool = False,
    ) -> int:
        """Return Full KV slots (and, unless ``full_only``, every peer pool's slots
        mapped from them) to their pools."""
        indices = values[0] if len(values) == 1 else torch.cat(values)
        if not full_only and self.hooks.kv_peers:
            if not trusted:  # the peers translate through tables indexed by these
                self.kv_pool.check_foreign(indices)
                trusted = True
            for component in self.hooks.kv_peers:
                component.peer_free(indices, cause, node)
        freed = self.kv_pool.free(indices, trusted)
        if self.events.enabled and freed:
            self.events.emit(EventKind.FREE, FULL, node, cause, int(indices.shape[0]), "pool=full")
        return freed

    def alloc_kv(self, num_tokens: int, evict: Optional[bool] = None) -> torch.Tensor:
        """Fresh Full slots (and their peers' slots, e.g. SWA), evicting the shortfall
        first like evict_for_alloc. Refused before anything changes when eviction
        cannot cover it."""
        pool = self.kv_pool
        bus = self.events
        with bus.op("alloc"):
            if type(num_tokens) is not int or num_tokens < 0:
                raise PoolError(f"cannot allocate {num_tokens!r} slots (need a non-negative int)")
            shorts = self.shortfalls(num_tokens)
            if any(short > 0 for short in shorts.values()):
                self.ensure_capacity(shorts, {}, self.auto_evict if evict is None else evict)
                self.evict_for_alloc(EvictParams.of({name: max(0, short) for name, short in shorts.items()}))
            slots = pool.alloc(num_tokens)
            try:
                for component in self.hooks.kv_peers:
                    component.peer_alloc(slots)
            except BaseException:  # a peer pool failed after all (a fault): no half allocation
                self.free_kv([slots])
                raise
            if bus.enabled and num_tokens:
                bus.emit(EventKind.ALLOC, FULL, None, Cause.REQUEST, num_tokens, "pool=full")
            return slots

    def shortfalls(self, num_tokens: int, states: int = 0) -> dict[str, int]:
        """Slots each pool lacks for ``num_tokens`` Full slots (and their peers') plus
        ``states`` slots of each pool that gives requests their own (Mamba's states)."""
        pool = self.kv_pool
        shorts = {FULL: pool.pages_for(num_tokens) * self.page_size - pool.available_size()}
        for component in self.hooks.kv_peers:
            shorts[component.name] = component.peer_shortfall(num_tokens)
        if states:
            for component in self.hooks.slots_for_request:
                shorts[component.name] = states - component.available_size()
        return shorts

    def check_capacity(self, num_tokens: int, mamba_states: int = 0, evict: Optional[bool] = None) -> None:
        """Refuse (PoolExhaustedError), before anything changes, what alloc_kv(num_tokens)
        and ``mamba_states`` alloc_mamba_state calls could not get together. A caller
        making several allocations checks them all here first, so a later one is not
        refused after an earlier one took slots or evicted. Checking each pool against
        its own free and evictable slots stays exact for several at once: eviction for
        one pool only turns the others' evictable slots into free ones."""
        shorts = self.shortfalls(num_tokens, mamba_states)
        if any(short > 0 for short in shorts.values()):
            self.ensure_capacity(shorts, {}, self.auto_evict if evict is None else evict)

    def ensure_capacity(self, shorts: dict[str, int], pinned: dict[str, int], evict: bool) -> None:
        """Refuse, before anything changes, an allocation eviction cannot cover. Every
        unlocked token of a component is reachable by its eviction walk (locks are
        path or window locks), so its evictable count (less what the caller is about
        to pin) is exactly what eviction can give back."""
        for name, short in shorts.items():
            if short <= 0:
                continue
            reclaimable = (self.tree.evictable_size(name) - pinned.get(name, 0)) if evict else 0
            if short > reclaimable:
                raise PoolExhaustedError(
                    f"{name} pool exhausted: {short} more slot(s) needed, {self.available_size(name)} free"
                    + (f", {reclaimable} evictable" if evict else " (auto_evict is off)"), pool=name)

    # SGLang's names for two components' own pool calls, kept as the cache API; each
    # needs the component whose folder lists it (``CALLS``)
    def alloc_mamba_state(self, tokens: list[int]) -> torch.Tensor:
        """A fresh state slot holding the state after ``tokens`` (for a direct insert)."""
        mamba = self._needs("alloc_mamba_state")
        slot = mamba.alloc_slot()
        mamba.pool.write(slot, int(prefix_hashes(tokens)[-1]) if len(tokens) else -1)  # hashed on the host
        return slot

    def free_mamba_state(self, slot: torch.Tensor) -> None:
        self._needs("free_mamba_state").pool.free(slot)

    def free_swa(self, full_slots: torch.Tensor) -> None:
        """Free only the SWA side of these Full slots (a request's out-of-window KV)."""
        self._needs("free_swa").peer_free(full_slots, Cause.WINDOW, None)

    def _needs(self, call: str):
        name = COMPONENT_REGISTRY.offering(call)
        component = self.by_name.get(name)
        if component is None:
            raise CacheError(f"{call} needs the {name} component")
        return component

    def write_kv(self, slots: torch.Tensor, tokens: list[int], start: int = 0) -> None:
        """Write KV (fingerprints) for tokens[start:] of a sequence into ``slots``."""
        if not self.fingerprints:
            return
        fps = prefix_hashes(tokens)[start:]  # hashed on the host; the buffers take a host array
        self.kv_buffer.write(slots, fps)
        for component in self.hooks.kv_peers:
            component.peer_write(slots, fps)

    # ---- eviction -------------------------------------------------------------
    def evict(self, params: EvictParams) -> EvictResult:
        self._check_evict_params(params)
        with self.events.op("evict"):
            return self._evict(params, None)

    def evict_for_alloc(self, params: EvictParams) -> EvictResult:
        """Evict until each pool named in ``params`` has its shortfall free; stops as
        soon as it has, even if that took fewer tokens than requested."""
        self._check_evict_params(params)
        targets = {}
        for component in self.components:
            request = params.request_for(component.name)
            if request > 0:
                targets[component.name] = self.available_size(component.name) + request
        with self.events.op("evict_for_alloc"):
            return self._evict(params, targets)

    @staticmethod
    def _check_evict_params(params: EvictParams) -> None:
        a, b, c = params.num_tokens, params.swa_num_tokens, params.mamba_num
        if type(a) is int and type(b) is int and type(c) is int and a >= 0 and b >= 0 and c >= 0 and not params.by_component:
            return
        for field in ("num_tokens", "swa_num_tokens", "mamba_num"):
            value = getattr(params, field)
            if type(value) is not int or value < 0:
                raise CacheError(f"evict: {field} must be a non-negative int (got {value!r})")
        for name, value in params.by_component.items():
            if type(value) is not int or value < 0:
                raise CacheError(f"evict: by_component[{name!r}] must be a non-negative int (got {value!r})")

    def _evict(self, params: EvictParams, targets: Optional[dict[str, int]]) -> EvictResult:
        tree = self.tree
        batch = tree.new_eviction(Cause.CAPACITY)
        counts = batch.counts

        def reached(name: str) -> bool:  # only allocation-driven eviction has targets
            if name not in targets:
                return False
            self._drain(batch, settle=False)
            return self.available_size(name) >= targets[name]

        for component in self.components:
            name = component.name
            request = params.request_for(name)
            if request == 0:
                continue
            to_target = targets is not None and name == FULL
            if (targets is not None and reached(name)) or (not to_target and counts[name] >= request):
                continue
            # an allocation-driven Full walk runs until the pool reaches its target
            quota = max(request, counts[name] + tree.evictable[0]) if to_target else request
            batch.walk(name, request)
            component.evict_start(quota)
            try:
                while True:
                    node, progress = component.evict_next(batch)
                    if node is not None:
                        if component.index == 0 and tree.eviction_audit is not None:
                            tree.audit_full_victim(node)
                        if self.host is None or self.host.before_device_eviction(node):
                            tree.delete_leaf(node, batch)
                        else:  # write-back kept it on the device: the walk passes it by
                            component.pass_by(node)
                    elif not progress:
                        break
                    if targets is not None and reached(name):
                        break
            finally:
                component.evict_end()
        self._drain(batch)
        return EvictResult(**result_fields(counts), by_component=dict(counts))

    def _drain(self, batch, settle: bool = True) -> None:
        """Execute the batch's pending frees on the pools, component by component
        (reported as CAPACITY frees, window releases included), and the host's.
        ``settle``: the eviction ends, so do the stores it queued (immediate), unless a
        scheduler step is open: v0.5.23 acks them at the poll after its step, their host
        locks held through the walk and the step's later calls."""
        self.free_batch(batch, Cause.CAPACITY)
        if self.host is not None:  # host copies that went with deleted nodes
            self.host.drain()
            if settle and self.host.storage is not None and not self.host.step_depth:  # write-back's stores
                self.host.storage.settle_immediate()

    def free_batch(self, batch, cause: Cause) -> None:
        """The batch's pending device frees, on each component's pool, reported as ``cause``."""
        for component in self.components:
            values = batch.take_frees(component.name)
            if values:
                if cause is Cause.CAPACITY:
                    self.metrics.add(f"{component.name}_evicted_total", sum(int(v.shape[0]) for v in values))
                component.free_device_values(values, cause, None)

    # ---- locks ----------------------------------------------------------------
    def inc_lock_ref(self, node_id: int, skip_lock_components: tuple[str, ...] = ()) -> IncLockRefResult:
        if not self.events.enabled:  # (the hottest calls: no scope to enter while nobody listens)
            return self.tree.locks.inc_lock_ref(node_id, tuple(skip_lock_components))
        with self.events.op("inc_lock_ref"):
            return self.tree.locks.inc_lock_ref(node_id, tuple(skip_lock_components))

    def dec_lock_ref(self, node_id: int, params: DecLockRefParams | IncLockRefResult, skip_swa: bool = False) -> None:
        if not self.events.enabled:
            return self.tree.locks.dec_lock_ref(node_id, params, skip_swa)
        with self.events.op("dec_lock_ref"):
            self.tree.locks.dec_lock_ref(node_id, params, skip_swa)

    def release_window(self, node_id: int, receipt: IncLockRefResult) -> None:
        """Early release of a lock's SWA window part (decode has moved past the
        window); its Full lock stays until dec_lock_ref."""
        with self.events.op("release_window"):
            self._release_window(node_id, receipt)

    def _release_window(self, node_id: int, receipt) -> None:
        batch = self.tree.new_eviction(Cause.WINDOW)
        self.tree.dec_window_lock(node_id, receipt, batch)
        self._drain(batch)

    # ---- sizes ------------------------------------------------------------------
    def available_size(self, component: str = FULL) -> int:
        return self.kv_pool.available_size() if component == FULL else self.by_name[component].available_size()

    def evictable_size(self, component: str = FULL) -> int:
        return self.tree.evictable_size(component)

    def protected_size(self, component: str = FULL) -> int:
        return self.tree.protected_size(component)

    def full_evictable_size(self) -> int:
        return self.tree.evictable[0]

    def full_protected_size(self) -> int:
        return self.tree.protected[0]

    def total_size(self, component: str = FULL) -> int:
        return self.kv_pool.size if component == FULL else self.by_name[component].pool_size()

    def path_device_indices(self, node_id: int) -> torch.Tensor:
        return self.tree.path_device_indices(node_id)

    def close(self) -> None:
        """Remove the storage tier's private directory now (else it goes when the cache
        is collected, or at exit); a named storage directory keeps its pages."""
        if self.host is not None and self.host.storage is not None:
            self.host.storage.close()

    def reset(self) -> None:
        """Empty tree, every pool free, no running request."""
        self.tree.reset()
        self.metrics.reset()
        self.kv_pool.clear()
        if self.host is not None:
            self.host.reset()
        for component in self.hooks.own_pools:
            component.reset_pool()
        self.requests.clear()
        self.retracted.clear()
        self.session_controller.sessions.clear()
        self.session_slots.clear()

    # ---- session radix cache (v0.5.23's names; tree/session_refs.py) ------------------
    def open_radix_session(self, session_id: str) -> int:
        with self.events.op("open_radix_session"):
            return self.session_refs.open_radix_session(session_id)

    def ensure_session_generation(self, session_id: str) -> int:
        with self.events.op("ensure_session_generation"):
            return self.session_refs.ensure_session_generation(session_id)

    def release_radix_session(self, session_id: str) -> int:
        with self.events.op("release_radix_session"):
            return self.session_refs.release_radix_session(session_id)

    def snapshot(self):
        from .snapshot import take_snapshot

        return take_snapshot(self)


def _check_component_fields(components: list, extra) -> None:
    """Every component's own config fields are valid (required ones given), and each
    extra field is one its owner declares."""
    declared = set()
    for component in components:
        for field in component.config_fields:
            component.config_value(field)
            declared.add(field)
    unknown = sorted(set(extra) - declared)
    if unknown:
        raise ValueError(f"unknown config field(s) {unknown}; the components declare {sorted(declared)}")
