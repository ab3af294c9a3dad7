"""``UnifiedRadixCache``: the controller. It owns the pools and the request flows,
asks the tree core for decisions and executes them (allocations, frees, copies).

Public names follow SGLang (match_prefix, insert, evict, evict_for_alloc,
inc_lock_ref, dec_lock_ref, cache_finished_req, cache_unfinished_req) so cache
engineers can read a scenario as they would read scheduler code.
"""

from __future__ import annotations

import itertools
from typing import Optional

import torch

from .actions import ComponentAction, FreeDeviceKV, FreeDeviceKVFullOnly
from .components import COMPONENT_REGISTRY, TreeComponent
from .config import CacheConfig
from .device import resolve_device
from .errors import CacheError, InvalidKeyError, InvalidValueError, PoolError, PoolExhaustedError
from .events import Cause, EventBus, EventKind
from .keys import RadixKey
from .params import (
    DecLockRefParams,
    EvictParams,
    EvictResult,
    IncLockRefResult,
    InsertParams,
    InsertResult,
    MatchPrefixParams,
    MatchResult,
)
from .pools import KVFingerprintBuffer, PagedAllocator, prefix_fingerprints
from .request import Req
from .tree_core import UnifiedTreeCore


class UnifiedRadixCache:
    def __init__(self, config: Optional[CacheConfig] = None, **kwargs) -> None:
        self.config = config if config is not None else CacheConfig(**kwargs)
        cfg = self.config
        self.device = resolve_device(cfg.device)
        self.page_size = cfg.page_size
        self.auto_evict = cfg.auto_evict
        self.events = EventBus()
        self.kv_pool = PagedAllocator(cfg.kv_size, cfg.page_size, self.device, "full")
        self.kv_buffer = KVFingerprintBuffer(cfg.kv_size, self.device)
        self.components = [COMPONENT_REGISTRY[name](self, i) for i, name in enumerate(cfg.components)]
        self.by_name = {c.name: c for c in self.components}
        self.tree = UnifiedTreeCore(self.components, cfg.page_size, self.device, self.events)
        self._cache_finalizers = [
            c for c in self.components if type(c).finalize_match_in_cache is not TreeComponent.finalize_match_in_cache
        ]
        self._kv_peers = [c for c in self.components if c.kv_peer]
        self._mamba = self.by_name.get("mamba")
        self._names = [c.name for c in self.components]
        self.requests: dict[str, Req] = {}
        self._rids = itertools.count(1)
        self.fingerprints = True  # write_kv records KV fingerprints (off only for timing replays)
        self.fault_hits: dict[str, int] = {}  # fault name -> times it changed behaviour (cache/faults)
        if cfg.faults:
            from .faults import install_faults

            install_faults(self, cfg.faults)

    # ---- match / insert -------------------------------------------------------
    def _observed(self, op: str, fn, *args):
        """Run ``fn`` as public op ``op`` for the event stream (only when observed)."""
        bus = self.events
        bus.begin(op)
        try:
            return fn(*args)
        finally:
            bus.end()

    def match_prefix(self, params: MatchPrefixParams | RadixKey) -> MatchResult:
        if not isinstance(params, MatchPrefixParams):
            params = MatchPrefixParams(_as_key(params))
        if params.cow_mamba and params.req is None:
            raise InvalidValueError("cow_mamba needs the request that receives the copy (params.req)")
        if self.events.enabled:
            return self._observed("match_prefix", self._match_prefix, params)
        return self._match_prefix(params)

    def _match_prefix(self, params: MatchPrefixParams) -> MatchResult:
        result = self.tree.match_prefix(params.key)
        for component in self._cache_finalizers:
            result = component.finalize_match_in_cache(params, result)
        return result

    def insert(self, params: InsertParams) -> InsertResult:
        if type(params.key) is not RadixKey:
            params.key = _as_key(params.key)
        if params.prev_prefix_len < 0:
            raise CacheError(f"prev_prefix_len must be >= 0 (got {params.prev_prefix_len})")
        floor = params.swa_evicted_seqlen
        if floor != 0 and (type(floor) is not int or floor < 0 or floor % self.page_size):
            raise InvalidValueError(f"swa_evicted_seqlen must be a non-negative multiple of page_size {self.page_size} (got {floor!r})")
        if self._mamba is not None:
            self._mamba.check_insert_value(params.mamba_value)
        if self.events.enabled:
            return self._observed("insert", self.tree.insert, params, self._apply_actions)
        return self.tree.insert(params, self._apply_actions)

    def _apply_actions(self, actions: list) -> None:
        for action in actions:
            if isinstance(action, FreeDeviceKV):
                self.free_kv(action.values, action.cause, action.node)
            elif isinstance(action, FreeDeviceKVFullOnly):
                self.free_kv(action.values, action.cause, action.node, full_only=True)
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
        if not full_only:
            for component in self._kv_peers:
                component.peer_free(indices, cause, node)
        freed = self.kv_pool.free(indices, trusted)
        if self.events.enabled and freed:
            self.events.emit(EventKind.FREE, "full", node, cause, int(indices.shape[0]), "pool=full")
        return freed

    def alloc_kv(self, num_tokens: int, evict: Optional[bool] = None) -> torch.Tensor:
        """Fresh Full slots (and their peers' slots, e.g. SWA), evicting the shortfall
        first like evict_for_alloc. Refused before anything changes when eviction
        cannot cover it."""
        pool = self.kv_pool
        bus = self.events
        if bus.enabled:
            bus.begin("alloc")
        try:
            if type(num_tokens) is not int or num_tokens < 0:
                raise PoolError(f"cannot allocate {num_tokens!r} slots (need a non-negative int)")
            shorts = self._shortfalls(num_tokens)
            if any(short > 0 for short in shorts.values()):
                self._ensure_capacity(shorts, {}, self.auto_evict if evict is None else evict)
                self.evict_for_alloc(
                    EvictParams(num_tokens=max(0, shorts["full"]), swa_num_tokens=max(0, shorts.get("swa", 0)))
                )
            slots = pool.alloc(num_tokens)
            try:
                for component in self._kv_peers:
                    component.peer_alloc(slots)
            except BaseException:  # a peer pool failed after all (a fault): no half allocation
                self.free_kv([slots])
                raise
            if bus.enabled and num_tokens:
                bus.emit(EventKind.ALLOC, "full", None, Cause.REQUEST, num_tokens, "pool=full")
            return slots
        finally:
            if bus.enabled:
                bus.end()

    def _shortfalls(self, num_tokens: int, states: int = 0) -> dict[str, int]:
        """Slots each pool lacks for ``num_tokens`` Full slots (and their peers') plus
        ``states`` Mamba state slots."""
        pool = self.kv_pool
        shorts = {"full": pool.pages_for(num_tokens) * self.page_size - pool.available_size()}
        for component in self._kv_peers:
            shorts[component.name] = component.peer_shortfall(num_tokens)
        if states and self._mamba is not None:
            shorts["mamba"] = states - self._mamba.available_size()
        return shorts

    def check_capacity(self, num_tokens: int, mamba_states: int = 0, evict: Optional[bool] = None) -> None:
        """Refuse (PoolExhaustedError), before anything changes, what alloc_kv(num_tokens)
        and ``mamba_states`` alloc_mamba_state calls could not get together. A caller
        making several allocations checks them all here first, so a later one is not
        refused after an earlier one took slots or evicted. Checking each pool against
        its own free and evictable slots stays exact for several at once: eviction for
        one pool only turns the others' evictable slots into free ones."""
        shorts = self._shortfalls(num_tokens, mamba_states)
        if any(short > 0 for short in shorts.values()):
            self._ensure_capacity(shorts, {}, self.auto_evict if evict is None else evict)

    def _ensure_capacity(self, shorts: dict[str, int], pinned: dict[str, int], evict: bool) -> None:
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
                    + (f", {reclaimable} evictable" if evict else " (auto_evict is off)")
                )

    def alloc_mamba_state(self, tokens: list[int]) -> torch.Tensor:
        """A fresh state slot holding the state after ``tokens`` (for a direct insert)."""
        if self._mamba is None:
            raise CacheError("alloc_mamba_state needs the mamba component")
        slot = self._mamba.alloc_slot()
        fps = prefix_fingerprints(tokens, self.device)
        self._mamba.pool.write(slot, int(fps[-1]) if len(tokens) else -1)
        return slot

    def free_mamba_state(self, slot: torch.Tensor) -> None:
        if self._mamba is None:
            raise CacheError("free_mamba_state needs the mamba component")
        self._mamba.pool.free(slot)

    def free_swa(self, full_slots: torch.Tensor) -> None:
        """Free only the SWA side of these Full slots (a request's out-of-window KV)."""
        swa = self.by_name.get("swa")
        if swa is None:
            raise CacheError("free_swa needs the swa component")
        swa.peer_free(full_slots, Cause.WINDOW, None)

    def write_kv(self, slots: torch.Tensor, tokens: list[int], start: int = 0) -> None:
        """Write KV (fingerprints) for tokens[start:] of a sequence into ``slots``."""
        if not self.fingerprints:
            return
        fps = prefix_fingerprints(tokens, self.device)[start:]
        self.kv_buffer.write(slots, fps)
        for component in self._kv_peers:
            component.peer_write(slots, fps)

    # ---- eviction -------------------------------------------------------------
    def evict(self, params: EvictParams) -> EvictResult:
        self._check_evict_params(params)
        if self.events.enabled:
            return self._observed("evict", self._evict, params, None)
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
        if self.events.enabled:
            return self._observed("evict_for_alloc", self._evict, params, targets)
        return self._evict(params, targets)

    @staticmethod
    def _check_evict_params(params: EvictParams) -> None:
        a, b, c = params.num_tokens, params.swa_num_tokens, params.mamba_num
        if type(a) is int and type(b) is int and type(c) is int and a >= 0 and b >= 0 and c >= 0:
            return
        for field in ("num_tokens", "swa_num_tokens", "mamba_num"):
            value = getattr(params, field)
            if type(value) is not int or value < 0:
                raise CacheError(f"evict: {field} must be a non-negative int (got {value!r})")

    def _evict(self, params: EvictParams, targets: Optional[dict[str, int]]) -> EvictResult:
        names = self._names
        tracker = dict.fromkeys(names, 0)
        frees: dict[str, list] = {name: [] for name in names}
        tree = self.tree

        def reached(name: str) -> bool:  # only allocation-driven eviction has targets
            if name not in targets:
                return False
            self._drain(frees)
            return self.available_size(name) >= targets[name]

        for component in self.components:
            name = component.name
            request = params.request_for(name)
            if request == 0:
                continue
            to_target = targets is not None and name == "full"
            if (targets is not None and reached(name)) or (not to_target and tracker[name] >= request):
                continue
            # an allocation-driven Full walk runs until the pool reaches its target
            quota = max(request, tracker[name] + tree.evictable[0]) if to_target else request
            component.evict_start(quota)
            try:
                while True:
                    node, progress = component.evict_next(tracker, frees)
                    if node is not None:
                        tree.delete_leaf(node, tracker, frees, Cause.CAPACITY, name, request)
                    elif not progress:
                        break
                    if targets is not None and reached(name):
                        break
            finally:
                component.evict_end()
        self._drain(frees)
        return EvictResult(tracker["full"], tracker.get("swa", 0), tracker.get("mamba", 0))

    def _drain(self, frees: dict[str, list]) -> None:
        """Execute the tree's eviction frees on the pools, component by component."""
        for component in self.components:
            values = frees[component.name]
            if values:
                frees[component.name] = []
                component.free_device_values(values, Cause.CAPACITY, None)

    # ---- locks ----------------------------------------------------------------
    def inc_lock_ref(self, node_id: int, skip_lock_components: tuple[str, ...] = ()) -> IncLockRefResult:
        if self.events.enabled:
            return self._observed("inc_lock_ref", self.tree.inc_lock_ref, node_id, tuple(skip_lock_components))
        return self.tree.inc_lock_ref(node_id, skip_lock_components)

    def dec_lock_ref(self, node_id: int, params: DecLockRefParams | IncLockRefResult, skip_swa: bool = False) -> None:
        if self.events.enabled:
            return self._observed("dec_lock_ref", self.tree.dec_lock_ref, node_id, params, skip_swa)
        self.tree.dec_lock_ref(node_id, params, skip_swa)

    def release_window(self, node_id: int, receipt: IncLockRefResult) -> None:
        """Early release of a lock's SWA window part (decode has moved past the
        window); its Full lock stays until dec_lock_ref."""
        if self.events.enabled:
            return self._observed("release_window", self._release_window, node_id, receipt)
        self._release_window(node_id, receipt)

    def _release_window(self, node_id: int, receipt) -> None:
        frees: dict[str, list] = {c.name: [] for c in self.components}
        self.tree.dec_window_lock(node_id, receipt, frees)
        self._drain(frees)

    # ---- requests ---------------------------------------------------------------
    def new_request(self, tokens: list[int], rid: Optional[str] = None, extra_key: Optional[str] = None) -> Req:
        """Admit a request: match its prefix, lock it, allocate and write the rest.

        Refused before anything changes when eviction cannot make room. When the pools
        already have room, every slot is taken before the match, so nothing can fail
        after it. When eviction is needed the prefix is matched and locked first (so
        eviction cannot take it); the room was checked, so only a fault (a bug, or one
        a test injects) fails after that, and then the slots and the lock go back but
        the match's split and LRU refresh, and what was evicted, stay."""
        key = RadixKey(tokens, extra_key)
        rid = rid if rid is not None else f"req{next(self._rids)}"
        if rid in self.requests:
            raise CacheError(f"request {rid!r} is already running")
        req = Req(rid, list(tokens), self.tree._empty, self.tree.root.id, None, extra_key=extra_key)
        bus = self.events
        if bus.enabled:
            outer = bus.begin_request("new_request", rid)
        try:
            path = self.tree.peek_match(key)
            need = len(tokens) - sum(n for _, n in path)
            shorts = self._shortfalls(need)
            for component in self.components:
                slots = component.slots_for_request()
                if slots:
                    shorts[component.name] = slots - component.available_size()
            pinned = {c.name: c.pinned_by_lock(path) for c in self.components}
            self._ensure_capacity(shorts, pinned, self.auto_evict)
            self._admit(req, key, need if all(short <= 0 for short in shorts.values()) else None)
            self.requests[rid] = req
            return req
        finally:
            if bus.enabled:
                bus.end_request(outer)

    def _admit(self, req: Req, key: RadixKey, need: Optional[int]) -> None:
        """new_request's mutating part; ``need`` given: the pools have room for it."""
        fresh, match, lock = None, None, None
        try:
            if need is not None:
                for component in self.components:
                    component.reserve_request(req)
                fresh = self.alloc_kv(need)
            match = self.match_prefix(MatchPrefixParams(key, cow_mamba="mamba" in self.by_name, req=req))
            prefix_len = match.prefix_len
            lock = self.tree.inc_lock_ref(match.last_device_node)
            if fresh is None:
                fresh = self.alloc_kv(len(req.origin_input_ids) - prefix_len)
            assert fresh.shape[0] == len(req.origin_input_ids) - prefix_len, "peek_match and match_prefix disagree"
            self.write_kv(fresh, req.origin_input_ids, prefix_len)
            req.kv_indices = torch.cat([match.device_indices, fresh]) if prefix_len else fresh
            for component in self.components:
                component.admit_request(req)
        except BaseException:  # give back everything taken so far
            if lock is not None:
                self.tree.dec_lock_ref(match.last_device_node, lock)
            if fresh is not None and fresh.shape[0]:
                self.free_kv([fresh])
            for component in self.components:
                component.release_request(req)
            req.kv_indices = self.tree._empty
            raise
        req.last_node, req.lock, req.cache_protected_len = match.last_device_node, lock, prefix_len
        req.swa_branching_seqlen = match.swa_branching_seqlen

    def extend_request(self, req: Req, tokens: list[int], slide: bool = False) -> None:
        """Decode: append tokens, filling the request's last part-used page first; with
        ``slide``, then free what fell out of the window (slide_window), so a decode
        step that slides is one call that is refused whole or not at all. The only
        allocation comes before any change."""
        if self.events.enabled:  # stamp the request on the events of its allocation and slide
            outer = self.events.enter_request(req.rid)
            try:
                return self._extend_request(req, tokens, slide)
            finally:
                self.events.exit_request(outer)
        self._extend_request(req, tokens, slide)

    def _extend_request(self, req: Req, tokens: list[int], slide: bool) -> None:
        self._check_live(req)
        _as_key(tokens)  # validates the ids
        if slide and "swa" not in self.by_name:
            raise CacheError("slide_window needs the swa component")
        start = req.kv_len
        ps = self.page_size
        in_page = (ps - start % ps) % ps if start else 0
        reuse = min(in_page, len(tokens))
        fresh = self.alloc_kv(len(tokens) - reuse) if len(tokens) > reuse else None
        parts = []
        if reuse:  # the rest of the last page (its peers' pages were taken with it)
            last = req.kv_indices[-1:]
            filled = last + torch.arange(1, reuse + 1, dtype=torch.int64, device=self.device)
            for component in self._kv_peers:
                component.peer_continue(last, filled)
            parts.append(filled)
        if fresh is not None:
            parts.append(fresh)
        req.output_ids.extend(tokens)
        if parts:
            new = torch.cat(parts)
            self.write_kv(new, req.fill_ids, start)
            req.kv_indices = torch.cat([req.kv_indices, new])
            for component in self.components:
                component.advance_request(req, start)
        if slide:
            self.slide_window(req)

    def slide_window(self, req: Req) -> None:
        """Decode moved on: free the request's SWA slots that fell out of the window
        (the scheduler's maybe_evict_swa at seqlen - 1). The prefix's SWA lock stays
        (v0.5.23 releases it early only behind an opt-in flag; see release_window)."""
        self._check_live(req)
        swa = self.by_name.get("swa")
        if swa is None:
            raise CacheError("slide_window needs the swa component")
        bus = self.events
        if bus.enabled:
            outer = bus.begin_request("slide_window", req.rid)
        try:
            swa.slide_window(req, req.kv_len - 1)
        finally:
            if bus.enabled:
                bus.end_request(outer)

    def cache_finished_req(self, req: Req, is_insert: bool = True) -> None:
        """The request is done: cache what it computed (page-aligned), free the rest,
        release its lock."""
        self._check_live(req)
        bus = self.events
        if bus.enabled:
            outer = bus.begin_request("cache_finished_req", req.rid)
        try:
            if is_insert:
                self._checkpoint(req, finished=True)  # runs the components' cleanup
            own = req.own_indices
            if own.shape[0]:
                self.free_kv([own], Cause.TAIL if is_insert else Cause.REQUEST, None)
            if req.lock is not None:
                self.tree.dec_lock_ref(req.last_node, req.lock)
            req.lock = None
            if not is_insert:
                for component in self.components:
                    component.cleanup_after_caching_req(req, True, None, None)
            req.released = True
            req.kv_indices = req.kv_indices[:0]
            self.requests.pop(req.rid, None)
        finally:
            if bus.enabled:
                bus.end_request(outer)

    def cache_unfinished_req(self, req: Req, chunked: bool = False) -> None:
        """Chunked prefill: cache what is computed so far and move the request's lock
        onto the node the insert ended on; the request keeps its unaligned tail."""
        self._check_live(req)
        bus = self.events
        if bus.enabled:
            outer = bus.begin_request("cache_unfinished_req", req.rid)
        try:
            self._checkpoint(req, finished=False, chunked=chunked)
        finally:
            if bus.enabled:
                bus.end_request(outer)

    def _checkpoint(self, req: Req, finished: bool, chunked: bool = False) -> None:
        kv_len = req.kv_len
        tokens = req.fill_ids[:kv_len]
        params = InsertParams(
            key=None, prev_prefix_len=req.cache_protected_len, chunked=chunked, priority=req.priority,
            swa_evicted_seqlen=req.swa_evicted_seqlen, inserted_len=req.cache_inserted_len,
        )
        cache_len = kv_len
        for component in self.components:
            capped = component.prepare_for_caching_req(req, params, kv_len, finished)
            if capped is not None:
                cache_len = min(cache_len, capped)
        if cache_len <= 0:
            for component in self.components:
                component.cleanup_after_caching_req(req, finished, None, params)
            return
        key = RadixKey(tokens[:cache_len], req.extra_key)
        if not finished:
            for component in self.components:
                component.free_out_of_window_slots(req, len(key) - 1, params)
        key = key.page_aligned(self.page_size)
        aligned = len(key)
        if aligned < req.cache_protected_len:
            # the cacheable part (e.g. up to the last Mamba checkpoint) is already in
            # the tree below the request's locked prefix: nothing to add
            for component in self.components:
                component.cleanup_after_caching_req(req, finished, None, params)
            return
        params.key, params.value = key, req.kv_indices[:aligned]
        result = self.insert(params)
        req.cache_inserted_len = max(req.cache_inserted_len, aligned)
        prompt_len = len(req.origin_input_ids) - len(req.origin_input_ids) % self.page_size
        if len(self.components) == 1 and 0 < prompt_len < aligned:
            # split the leaf at the prompt boundary so the output can be evicted alone
            prompt = InsertParams(
                key[:prompt_len], params.value[:prompt_len], prev_prefix_len=prompt_len,
                priority=req.priority + 1, inserted_len=prompt_len,
            )
            self.insert(prompt)
        new_node = result.last_device_node
        tree_slots = self.tree.path_device_indices(new_node)
        protected = req.cache_protected_len
        req.kv_indices = torch.cat([req.kv_indices[:protected], tree_slots[protected:], req.kv_indices[aligned:]])
        old_lock, old_node = req.lock, req.last_node
        req.lock = self.tree.inc_lock_ref(new_node)
        if old_lock is not None:
            self.tree.dec_lock_ref(old_node, old_lock)
        req.last_node, req.cache_protected_len = new_node, aligned
        for component in self.components:
            component.cleanup_after_caching_req(req, finished, result, params)

    def _check_live(self, req: Req) -> None:
        if req.released or self.requests.get(req.rid) is not req:
            raise CacheError(f"request {req.rid!r} is not running (already finished?)")

    # ---- sizes ------------------------------------------------------------------
    def available_size(self, component: str = "full") -> int:
        if component == "full":
            return self.kv_pool.available_size()
        return self.by_name[component].available_size()

    def evictable_size(self, component: str = "full") -> int:
        return self.tree.evictable_size(component)

    def protected_size(self, component: str = "full") -> int:
        return self.tree.protected_size(component)

    def full_evictable_size(self) -> int:
        return self.tree.evictable[0]

    def full_protected_size(self) -> int:
        return self.tree.protected[0]

    def total_size(self, component: str = "full") -> int:
        if component == "full":
            return self.kv_pool.size
        return self.by_name[component].pool_size()

    def path_device_indices(self, node_id: int) -> torch.Tensor:
        return self.tree.path_device_indices(node_id)

    def reset(self) -> None:
        """Empty tree, every pool free, no running request."""
        self.tree.reset()
        self.kv_pool.clear()
        for component in self.components[1:]:
            component.reset_pool()
        self.requests.clear()

    def snapshot(self):
        from .snapshot import take_snapshot

        return take_snapshot(self)


def _as_key(key) -> RadixKey:
    if isinstance(key, RadixKey):
        return key
    if key is None:
        raise InvalidKeyError("a key is required")
    return RadixKey(key)
