"""The scheduler's side of the cache: a request's life from admission to caching.

SGLang keeps this sequence in its scheduler (match, lock, allocate on admission; fill
pages while decoding; insert and move the lock when a chunk or the whole request is
done). Here it is a mixin of ``UnifiedRadixCache`` so a scenario can drive requests
with one call each, while the controller itself stays the cache API: these flows use
only that API (``RequestOwner``: match_prefix, insert, alloc_kv, write_kv, free_kv,
the tree's locks) and the components' request hooks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from ..basics.errors import CacheError, InvalidValueError, PoolExhaustedError, ReferenceAssertsError, StateSlotsAssertError
from ..observe.events import Cause
from ..basics.keys import TOKEN_BYTES, RadixKey, as_key, ceil_align
from ..basics.params import InsertParams, MatchPrefixParams
from ..basics.request import Req

INT64_MAX = (1 << 63) - 1  # a prompt's priority + 1 saturates as SGLang's int64 does

if TYPE_CHECKING:
    from .owner import RequestOwner as _Owner  # the controller's names these flows use
else:
    _Owner = object


class RequestFlows(_Owner):
    """Admission (new_request), decode (extend_request, slide_window) and caching
    (checkpoint, release_kv_cache) of running requests. It reads the controller only
    by ``RequestOwner``'s names (owner.py)."""

    # ---- admission --------------------------------------------------------------
    def new_request(self, tokens: list[int], rid: Optional[str] = None, extra_key: Optional[str] = None,
                    chunk: Optional[int] = None, load_back: bool = False, mem_quota: Optional[int] = None,
                    session_id: Optional[str] = None, session_generation: Optional[int] = None,
                    cache_salt: Optional[str] = None) -> Req:
        """Admit a request: match its prefix, lock it, allocate and write the rest
        (with ``chunk``: only the next ``chunk`` prompt tokens, chunked prefill; the
        rest come with extend_prompt).

        Refused when eviction cannot make room for its KV, keeping only what the match
        did (as SGLang's scheduler, which matches before it admits); refused with
        nothing changed when its own state slots cannot be had (there SGLang's
        req_to_token pool asserts). When the pools
        already have room, every slot is taken before the match, so nothing can fail
        after it. When eviction is needed the prefix is matched and locked first (so
        eviction cannot take it), then the request's own slots (Mamba's states) are
        taken before its KV, in v0.5.23's order; the room was checked, so only a
        fault (a bug, or one a test injects) fails after that, and then the slots and
        the lock go back but the match's split and LRU refresh, and what was
        evicted, stay. ``load_back``: first bring the prefix's host part back
        (v0.5.23's init_load_back, within ``mem_quota``; see load_back.py).
        ``session_id``: the session it belongs to; with the session radix cache on and
        no ``session_generation`` given, the session's current one (opening it if it is
        closed or new, as the scheduler's ensure_session_generation does). ``cache_salt``:
        a second namespace beside ``extra_key`` ("" = none): salted KV is shared only with
        requests of the same salt."""
        key = RadixKey(tokens, extra_key, cache_salt)
        self._check_chunk(chunk)
        rid = rid if rid is not None else self.new_rid()
        if rid in self.requests:
            raise CacheError(f"request {rid!r} is already running")
        req = Req(rid, list(tokens), self.tree._empty, self.tree.root.id, None, extra_key=extra_key,
                  cache_salt=key.cache_salt, token_bytes=bytearray(key.data), session_id=session_id, session_generation=session_generation)
        if session_id is not None and session_generation is None and self.tree.session_radix_cache:
            req.session_generation = self.session_refs.ensure_session_generation(session_id)
        with self.events.op("new_request", request=rid):
            if load_back:  # the host tier's part of the prefix first (cache/requests/load_back.py)
                self._admit_loading_back(req, key, mem_quota, chunk)
                self.requests[rid] = req
                return req
            return self.admit_req(req, key, chunk)

    def admit_req(self, req: Req, key: RadixKey, chunk: Optional[int] = None) -> Req:
        """new_request's admission of a request already built (a streaming turn's too);
        ``key`` is what it matches (a streaming turn's stops one token short of its
        input, as init_next_round_input's)."""
        rid = req.rid
        if self.bigram_keys:  # EAGLE: the request matches token pairs (its row keeps every token's slot)
            key = key.bigram_view()  # peeked at as match_prefix will walk it
        path = self.tree.peek_match(key)
        need = self._first_chunk(req, sum(n for _, n in path), chunk)
        shorts = self.shortfalls(need)
        own = {}  # the request's own slots (Mamba's states), taken after its KV is known to fit
        for component in self.hooks.slots_for_request:
            slots = component.slots_for_request()
            if slots:
                own[component.name] = slots - component.available_size()
        pinned = {c.name: c.pinned_by_lock(path) for c in self.hooks.pinned_by_lock}
        try:
            self.ensure_capacity(shorts, pinned, self.auto_evict)
        except PoolExhaustedError:
            self._match_refused(req, key)
            raise
        try:
            self.ensure_capacity(own, pinned, True)
        except PoolExhaustedError as exc:
            self._match_refused(req, key)  # SGLang's assert comes after its match, whose refresh stays
            raise StateSlotsAssertError(
                f"SGLang asserts here: {exc} (HybridReqToTokenPool.alloc: 'Not enough space for mamba …', "
                "after evicting what it could)") from None
        shorts.update(own)
        self._admit(req, key, need if all(short <= 0 for short in shorts.values()) else None, chunk)
        self.requests[rid] = req
        return req

    def _match_refused(self, req: Req, key: RadixKey) -> None:
        """SGLang's scheduler matches a request before it knows it can admit it, so a
        refused admission keeps what its match did (a split, an LRU refresh); the state
        the match copied for the request goes back (sglang#16067's fix)."""
        try:
            self.match_prefix(MatchPrefixParams(key, cow_mamba=True, req=req))
        except StateSlotsAssertError:
            raise  # the match's copy found no state slot: SGLang asserts there, before any admission check
        except PoolExhaustedError:
            pass  # no room for the copy otherwise: the admission's own refusal is the one to tell
        finally:
            for component in self.hooks.release_request:
                component.release_request(req)

    def _admit(self, req: Req, key: RadixKey, need: Optional[int], chunk: Optional[int] = None) -> None:
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
                fresh = self.alloc_kv(self._first_chunk(req, prefix_len, chunk))
            assert fresh.shape[0] == self._first_chunk(req, prefix_len, chunk), "peek_match and match_prefix disagree"
            self.write_kv(fresh, req.origin_input_ids[: prefix_len + fresh.shape[0]], prefix_len)
            req.kv_indices = torch.cat([match.device_indices, fresh]) if prefix_len else fresh
            for component in hooks.admit_request:
                component.admit_request(req, prefix_len)
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

    @staticmethod
    def _first_chunk(req: Req, prefix_len: int, chunk: Optional[int]) -> int:
        """The prompt tokens a prefill pass computes after ``prefix_len``."""
        rest = len(req.origin_input_ids) - prefix_len
        return rest if chunk is None else min(rest, chunk)

    @staticmethod
    def _check_chunk(chunk: Optional[int]) -> None:
        if chunk is not None and (type(chunk) is not int or chunk < 1):
            raise InvalidValueError(f"chunk={chunk!r}: a prefill chunk is at least one token")

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
            if req.is_chunked:
                raise CacheError(f"request {req.rid!r} is still in chunked prefill: extend its prompt first")
            new = self.take_row_slots(req, len(tokens))
            req.output_ids.extend(tokens)
            req.token_bytes += packed
            self.grow_row(req, new)
            if slide:
                self.slide_window(req)

    def extend_prompt(self, req: Req, chunk: Optional[int] = None) -> None:
        """Chunked prefill's next pass: compute the next ``chunk`` prompt tokens (all
        that are left by default), filling the last part-used page first."""
        with self.events.for_request(req.rid):
            self._check_live(req)
            left = len(req.origin_input_ids) - req.kv_len
            if left <= 0:
                raise CacheError(f"request {req.rid!r} has computed its whole prompt")
            self._check_chunk(chunk)
            self.grow_row(req, self.take_row_slots(req, self._first_chunk(req, req.kv_len, chunk)))

    def take_row_slots(self, req: Req, count: int) -> Optional[torch.Tensor]:
        """The slots for the row's next ``count`` tokens: the rest of its last page
        (its peers' pages were taken with it), then fresh pages. Refused before any
        change when eviction cannot make room."""
        start, ps = req.kv_len, self.page_size
        in_page = (ps - start % ps) % ps if start else 0
        reuse = min(in_page, count)
        fresh = self.alloc_kv(count - reuse) if count > reuse else None
        parts = []
        if reuse:
            last = req.kv_indices[-1:]
            filled = last + torch.arange(1, reuse + 1, dtype=torch.int64, device=self.device)
            for component in self.hooks.kv_peers:
                component.peer_continue(last, filled)
            parts.append(filled)
        if fresh is not None:
            parts.append(fresh)
        return torch.cat(parts) if parts else None

    def grow_row(self, req: Req, new: Optional[torch.Tensor]) -> None:
        """Write the KV of the row's next tokens (``req.fill_ids`` holds them) and let
        the components see them computed."""
        if new is None:
            return
        start = req.kv_len
        self.write_kv(new, req.fill_ids[: start + new.shape[0]], start)
        req.kv_indices = torch.cat([req.kv_indices, new])
        for component in self.hooks.advance_request:
            component.advance_request(req, start)

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
        """The request ends (v0.5.23's release_kv_cache): with ``checkpoint``, cache
        what it owns (its KV up to the stop) first; free the rest of its row, release
        its lock, then free the KV past its stop that nothing can match, from the next
        whole page on (the paged free of the row took the page the stop is on)."""
        self._check_live(req)
        with self.events.op("release_kv_cache", request=req.rid):
            if self.keep_session_record(req):  # a streaming session keeps the record (sessions/streaming.py)
                return
            owned = req.owned_kv_len()
            if checkpoint:
                self._checkpoint(req, finished=True, up_to=owned)  # runs the components' cleanup
            protected, row = req.cache_protected_len, req.kv_indices
            if owned > protected:
                self.free_kv([row[protected:owned]], Cause.TAIL if checkpoint else Cause.REQUEST, None)
            if req.lock is not None:
                self.tree.dec_lock_ref(req.last_node, req.lock)
            req.lock = None
            past_stop = self._past_stop(owned, protected)
            if past_stop < row.shape[0]:
                self.free_kv([row[past_stop:]], Cause.STOP, None)
            if not checkpoint:
                for component in self.hooks.cleanup_after_caching_req:
                    component.cleanup_after_caching_req(req, True, None, None)
            req.released = True
            req.kv_indices = req.kv_indices[:0]
            self.requests.pop(req.rid, None)

    def _past_stop(self, owned: int, protected: int) -> int:
        """Where the KV past a stop starts being freed: the next page boundary (the
        row's paged free took the page the stop is on), never inside the tree's part."""
        return max(ceil_align(owned, self.page_size), protected)

    def checkpoint(self, req: Req, up_to: Optional[int] = None) -> None:
        """Cache the request's first ``up_to`` tokens (default: all it has computed)
        and move its lock onto the node the insert ended on; it keeps running, with
        its unaligned tail (v0.5.23's checkpoint: chunked prefill and the like). Its
        insert backs up on write-through as any insert does."""
        self._check_live(req)
        if up_to is not None and (type(up_to) is not int or not 0 <= up_to <= req.kv_len):
            raise InvalidValueError(f"up_to={up_to!r}: request {req.rid!r} has computed {req.kv_len} tokens")
        with self.events.op("checkpoint", request=req.rid):
            up_to = req.kv_len if up_to is None else up_to
            if not self.session_checkpoint(req, up_to):  # a streaming turn publishes at most its first prompt
                self._checkpoint(req, finished=False, up_to=up_to)

    def checkpoint_into_tree(self, req: Req, finished: bool, up_to: int) -> None:
        """Insert the request's first ``up_to`` tokens and move its lock there, with no op
        of its own (a streaming session's publishing checkpoint runs it inside its op)."""
        self._checkpoint(req, finished=finished, up_to=up_to)

    def _checkpoint(self, req: Req, finished: bool, up_to: int) -> None:
        """v0.5.23's checkpoint_into_tree: insert the request's first ``up_to`` tokens
        (as far as every component lets them be cached, page-aligned), point its row at
        the tree's slots, and move its lock onto the node the insert ended on (the old
        lock released first). Refused before any change where SGLang asserts."""
        hooks = self.hooks
        self._check_checkpoint(req, finished, up_to)
        params = InsertParams(
            key=None, prev_prefix_len=req.cache_protected_len, priority=req.priority,
            swa_evicted_seqlen=req.swa_evicted_seqlen, inserted_len=req.cache_inserted_len, session_id=req.session_id,
        )
        cache_len = up_to
        for component in hooks.prepare_for_caching_req:
            capped = component.prepare_for_caching_req(req, params, up_to, finished)
            if capped is not None:
                cache_len = min(cache_len, capped)
        for component in hooks.floor_cache_len:
            cache_len = component.floor_cache_len(cache_len)
        key = RadixKey.from_bytes(bytes(req.token_bytes[: max(cache_len, 0) * TOKEN_BYTES]), req.extra_key,
                                  req.cache_salt)
        if self.bigram_keys:  # EAGLE: one unit fewer than the tokens it spans
            key = key.bigram_view()
        if not finished:  # before the empty check, as v0.5.23 does; measured on the key
            for component in hooks.free_out_of_window_slots:
                component.free_out_of_window_slots(req, len(key) - 1, params)
        if cache_len <= 0:
            for component in hooks.cleanup_after_caching_req:
                component.cleanup_after_caching_req(req, finished, None, params)
            return
        key = key.page_aligned(self.page_size)
        aligned = len(key)
        params.key, params.value = key, req.kv_indices[:aligned]
        result = self.insert(params)
        req.cache_inserted_len = max(req.cache_inserted_len, aligned)
        prompt_len = len(req.origin_input_ids) - int(self.bigram_keys)  # EAGLE: the prompt's pairs
        prompt_len = max(prompt_len, 0) - max(prompt_len, 0) % self.page_size
        if self._prompt_split_ok and 0 < prompt_len < aligned:
            # split the leaf at the prompt boundary so the output can be evicted alone
            prompt = InsertParams(
                key[:prompt_len], params.value[:prompt_len], prev_prefix_len=prompt_len,
                priority=min(req.priority + 1, INT64_MAX), inserted_len=prompt_len,
            )
            self.insert(prompt)
        new_node = result.last_device_node
        tree_slots = self.tree.path_device_indices(new_node)
        assert tree_slots.shape[0] == aligned, "the insert ended off its key's end"
        protected = req.cache_protected_len
        req.kv_indices = torch.cat([req.kv_indices[:protected], tree_slots[protected:], req.kv_indices[aligned:]])
        if req.lock is not None:
            self.tree.dec_lock_ref(req.last_node, req.lock)
        # SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK: the re-lock leaves the new node's Mamba state evictable
        skip = tuple(c.name for c in self.tree.components if c.skips_decode_lock)
        req.lock = self.tree.inc_lock_ref(new_node, skip)
        req.last_node, req.cache_protected_len = new_node, aligned
        for component in hooks.cleanup_after_caching_req:
            component.cleanup_after_caching_req(req, finished, result, params)
        if finished and not req.finish_aborted and self.tree.session_radix_cache:
            # the insert's own end (the prompt split, if any, cut above it)
            self.session_refs.register_session_ref(req, self.tree.nodes[new_node])

    def _check_checkpoint(self, req: Req, finished: bool, up_to: int) -> None:
        """SGLang 0.5.23 asserts when a checkpoint's aligned length falls below the
        request's protected prefix (checkpoint_into_tree: protected <= path + page - 1),
        after its components have prepared and it has inserted. Ours works the length
        out read-only first; refusing, it keeps what SGLang's inserts did before the
        assert (see ``_insert_before_assert``) and nothing else."""
        cache_len = up_to
        for component in self.hooks.caching_len:
            capped = component.caching_len(req, up_to, finished)
            if capped is not None:
                cache_len = min(cache_len, capped)
        for component in self.hooks.floor_cache_len:
            cache_len = component.floor_cache_len(cache_len)
        key_len = max(cache_len - int(self.bigram_keys), 0)  # EAGLE: pairs
        aligned = key_len - key_len % self.page_size
        if cache_len > 0 and aligned < req.cache_protected_len:
            self._insert_before_assert(req, cache_len)
            raise ReferenceAssertsError(
                f"SGLang asserts here: request {req.rid!r} would checkpoint {aligned} tokens, below the "
                f"{req.cache_protected_len} its lock already protects (checkpoint_into_tree's "
                "cache_protected_len <= len(new_indices) + page_size - 1)"
            )

    def _insert_before_assert(self, req: Req, cache_len: int) -> None:
        """The inserts SGLang runs before that assert, on a path the request already
        protects: no slot changes hands (everything lies below ``prev_prefix_len``), but
        the walk refreshes each node's access time (which orders later evictions), may
        split a node at the key's end, the prompt split may raise a priority, and the
        request's inserted length grows (hits are counted past it). Not
        where a component forks state for the insert (Mamba): SGLang's fork would be
        lost with the assert, a pool difference the bridge reports instead."""
        if any(component.sets_checkpoints for component in self.components):
            return
        key = RadixKey.from_bytes(bytes(req.token_bytes[: cache_len * TOKEN_BYTES]), req.extra_key, req.cache_salt)
        if self.bigram_keys:
            key = key.bigram_view()
        key = key.page_aligned(self.page_size)
        aligned = len(key)
        if aligned == 0:
            return
        value = req.kv_indices[:aligned]
        self.insert(InsertParams(
            key, value, prev_prefix_len=req.cache_protected_len, priority=req.priority,
            swa_evicted_seqlen=req.swa_evicted_seqlen, inserted_len=req.cache_inserted_len,
            session_id=req.session_id,
        ))
        req.cache_inserted_len = max(req.cache_inserted_len, aligned)  # set before the assert: later hits count past it
        prompt_len = len(req.origin_input_ids) - int(self.bigram_keys)
        prompt_len = max(prompt_len, 0) - max(prompt_len, 0) % self.page_size
        if self._prompt_split_ok and 0 < prompt_len < aligned:
            self.insert(InsertParams(
                key[:prompt_len], value[:prompt_len], prev_prefix_len=prompt_len,
                priority=min(req.priority + 1, INT64_MAX), inserted_len=prompt_len,
            ))

    @property
    def _prompt_split_ok(self) -> bool:
        return all(component.prompt_split_ok for component in self.components)

    def _check_live(self, req: Req) -> None:
        if req.released or self.requests.get(req.rid) is not req:
            raise CacheError(f"request {req.rid!r} is not running (already finished?)")
