"""The scheduler's side of the cache: a request's life from admission to caching.

SGLang keeps this sequence in its scheduler (match, lock, allocate on admission; fill
pages while decoding; insert and move the lock when a chunk or the whole request is
done). Here it is a mixin of ``UnifiedRadixCache`` so a scenario can drive requests
with one call each, while the controller itself stays the cache API: these flows use
only that API (match_prefix, insert, alloc_kv, write_kv, free_kv, the tree's locks)
and the components' request hooks.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Optional

import torch

from .errors import CacheError
from .events import Cause
from .keys import TOKEN_BYTES, RadixKey, as_key
from .params import InsertParams, MatchPrefixParams
from .request import Req

if TYPE_CHECKING:
    from .components.base import TreeComponent
    from .events import EventBus
    from .hooks import HookTable
    from .tree_core import UnifiedTreeCore


class RequestFlows:
    """Admission (new_request), decode (extend_request, slide_window) and caching
    (checkpoint, release_kv_cache) of running requests."""

    # provided by UnifiedRadixCache
    tree: UnifiedTreeCore
    components: list[TreeComponent]
    by_name: dict[str, TreeComponent]
    hooks: HookTable
    events: EventBus
    page_size: int
    device: torch.device
    auto_evict: bool
    requests: dict[str, Req]
    _rids: Iterator[int]  # numbers for requests admitted without an id

    # ---- admission --------------------------------------------------------------
    def new_request(self, tokens: list[int], rid: Optional[str] = None, extra_key: Optional[str] = None,
                    load_back: bool = False, mem_quota: Optional[int] = None) -> Req:
        """Admit a request: match its prefix, lock it, allocate and write the rest.

        Refused before anything changes when eviction cannot make room. When the pools
        already have room, every slot is taken before the match, so nothing can fail
        after it. When eviction is needed the prefix is matched and locked first (so
        eviction cannot take it), then the request's own slots (Mamba's states) are
        taken before its KV, in v0.5.23's order; the room was checked, so only a
        fault (a bug, or one a test injects) fails after that, and then the slots and
        the lock go back but the match's split and LRU refresh, and what was
        evicted, stay. ``load_back``: first bring the prefix's host part back
        (v0.5.23's init_load_back, within ``mem_quota``; see request_load_back.py)."""
        key = RadixKey(tokens, extra_key)
        rid = rid if rid is not None else f"req{next(self._rids)}"
        if rid in self.requests:
            raise CacheError(f"request {rid!r} is already running")
        req = Req(rid, list(tokens), self.tree._empty, self.tree.root.id, None, extra_key=extra_key,
                  token_bytes=bytearray(key.data))
        with self.events.op("new_request", request=rid):
            if load_back:  # the host tier's part of the prefix first (cache/request_load_back.py)
                self._admit_loading_back(req, key, mem_quota)
                self.requests[rid] = req
                return req
            path = self.tree.peek_match(key)
            need = len(tokens) - sum(n for _, n in path)
            shorts = self._shortfalls(need)
            for component in self.hooks.slots_for_request:
                slots = component.slots_for_request()
                if slots:
                    shorts[component.name] = slots - component.available_size()
            pinned = {c.name: c.pinned_by_lock(path) for c in self.hooks.pinned_by_lock}
            self._ensure_capacity(shorts, pinned, self.auto_evict)
            self._admit(req, key, need if all(short <= 0 for short in shorts.values()) else None)
            self.requests[rid] = req
            return req

    def _admit(self, req: Req, key: RadixKey, need: Optional[int]) -> None:
        """new_request's mutating part; ``need`` given: the pools have room for it."""
        hooks = self.hooks
        fresh, match, lock = None, None, None
        try:
            if need is not None:
                for component in hooks.reserve_request:
                    component.reserve_request(req)
                fresh = self.alloc_kv(need)
            # the request gets its own copy of any state the match hands out (Mamba's)
            match = self.match_prefix(MatchPrefixParams(key, cow_mamba=True, req=req))
            prefix_len = match.prefix_len
            lock = self.tree.inc_lock_ref(match.last_device_node)
            if fresh is None:
                # v0.5.23's alloc_for_extend: the request's own slots first (their
                # eviction may free KV with the leaves it deletes), then the KV
                for component in hooks.reserve_request:
                    component.reserve_request(req)
                fresh = self.alloc_kv(len(req.origin_input_ids) - prefix_len)
            assert fresh.shape[0] == len(req.origin_input_ids) - prefix_len, "peek_match and match_prefix disagree"
            self.write_kv(fresh, req.origin_input_ids, prefix_len)
            req.kv_indices = torch.cat([match.device_indices, fresh]) if prefix_len else fresh
            for component in hooks.admit_request:
                component.admit_request(req)
        except BaseException:  # give back everything taken so far
            if lock is not None:
                self.tree.dec_lock_ref(match.last_device_node, lock)
            if fresh is not None and fresh.shape[0]:
                self.free_kv([fresh])
            for component in hooks.release_request:
                component.release_request(req)
            req.kv_indices = self.tree._empty
            raise
        req.last_node, req.lock, req.cache_protected_len = match.last_device_node, lock, prefix_len
        req.swa_branching_seqlen = match.swa_branching_seqlen

    # ---- decode -----------------------------------------------------------------
    def extend_request(self, req: Req, tokens: list[int], slide: bool = False) -> None:
        """Decode: append tokens, filling the request's last part-used page first; with
        ``slide``, then free what fell out of the window (slide_window), so a decode
        step that slides is one call that is refused whole or not at all. The only
        allocation comes before any change."""
        with self.events.for_request(req.rid):  # on the events of its allocation and slide
            self._check_live(req)
            packed = as_key(tokens).data  # validates the ids
            if slide and not self.hooks.slide_window:
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
                for component in self.hooks.kv_peers:
                    component.peer_continue(last, filled)
                parts.append(filled)
            if fresh is not None:
                parts.append(fresh)
            req.output_ids.extend(tokens)
            req.token_bytes += packed
            if parts:
                new = torch.cat(parts)
                self.write_kv(new, req.fill_ids, start)
                req.kv_indices = torch.cat([req.kv_indices, new])
                for component in self.hooks.advance_request:
                    component.advance_request(req, start)
            if slide:
                self.slide_window(req)

    def slide_window(self, req: Req) -> None:
        """Decode moved on: free the request's SWA slots that fell out of the window
        (the scheduler's maybe_evict_swa at seqlen - 1). The prefix's SWA lock stays
        (v0.5.23 releases it early only behind an opt-in flag; see release_window)."""
        self._check_live(req)
        if not self.hooks.slide_window:
            raise CacheError("slide_window needs the swa component")
        with self.events.op("slide_window", request=req.rid):
            for component in self.hooks.slide_window:
                component.slide_window(req, req.kv_len - 1)

    # ---- caching ----------------------------------------------------------------
    def release_kv_cache(self, req: Req, checkpoint: bool = True) -> None:
        """The request is done: cache what it computed (page-aligned), free the rest,
        release its lock."""
        self._check_live(req)
        with self.events.op("release_kv_cache", request=req.rid):
            if checkpoint:
                self._checkpoint(req, finished=True)  # runs the components' cleanup
            own = req.own_indices
            if own.shape[0]:
                self.free_kv([own], Cause.TAIL if checkpoint else Cause.REQUEST, None)
            if req.lock is not None:
                self.tree.dec_lock_ref(req.last_node, req.lock)
            req.lock = None
            if not checkpoint:
                for component in self.hooks.cleanup_after_caching_req:
                    component.cleanup_after_caching_req(req, True, None, None)
            req.released = True
            req.kv_indices = req.kv_indices[:0]
            self.requests.pop(req.rid, None)

    def checkpoint(self, req: Req) -> None:
        """Chunked prefill: cache what is computed so far and move the request's lock
        onto the node the insert ended on; the request keeps its unaligned tail. Like
        v0.5.23's checkpoint, whose insert has no "chunked" mark: a checkpoint backs up
        on write-through as any insert does."""
        self._check_live(req)
        with self.events.op("checkpoint", request=req.rid):
            self._checkpoint(req, finished=False)

    def _checkpoint(self, req: Req, finished: bool) -> None:
        """Insert what the request computed (as far as every component lets it be
        cached) and move its lock onto the node the insert ended on."""
        hooks = self.hooks
        kv_len = req.kv_len
        params = InsertParams(
            key=None, prev_prefix_len=req.cache_protected_len, priority=req.priority,
            swa_evicted_seqlen=req.swa_evicted_seqlen, inserted_len=req.cache_inserted_len,
        )
        cache_len = kv_len
        for component in hooks.prepare_for_caching_req:
            capped = component.prepare_for_caching_req(req, params, kv_len, finished)
            if capped is not None:
                cache_len = min(cache_len, capped)
        if cache_len <= 0:
            for component in hooks.cleanup_after_caching_req:
                component.cleanup_after_caching_req(req, finished, None, params)
            return
        key = RadixKey.from_bytes(bytes(req.token_bytes[: cache_len * TOKEN_BYTES]), req.extra_key)
        if not finished:
            for component in hooks.free_out_of_window_slots:
                component.free_out_of_window_slots(req, len(key) - 1, params)
        key = key.page_aligned(self.page_size)
        aligned = len(key)
        if aligned < req.cache_protected_len:
            # the cacheable part (e.g. up to the last Mamba checkpoint) is already in
            # the tree below the request's locked prefix: nothing to add
            for component in hooks.cleanup_after_caching_req:
                component.cleanup_after_caching_req(req, finished, None, params)
            return
        params.key, params.value = key, req.kv_indices[:aligned]
        result = self.insert(params)
        req.cache_inserted_len = max(req.cache_inserted_len, aligned)
        prompt_len = len(req.origin_input_ids) - len(req.origin_input_ids) % self.page_size
        if self._prompt_split_ok and 0 < prompt_len < aligned:
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
        for component in hooks.cleanup_after_caching_req:
            component.cleanup_after_caching_req(req, finished, result, params)

    @property
    def _prompt_split_ok(self) -> bool:
        return all(component.prompt_split_ok for component in self.components)

    def _check_live(self, req: Req) -> None:
        if req.released or self.requests.get(req.rid) is not req:
            raise CacheError(f"request {req.rid!r} is not running (already finished?)")
