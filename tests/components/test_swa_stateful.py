"""Hypothesis stateful test for FULL+SWA: random op sequences, invariants after every
step, for (page_size, window) in (1,4), (4,4) and (4,2) (window below a page).

Keys are pages drawn from a tiny alphabet over a few shared stems, so sequences
constantly share prefixes, split nodes and fight over small pools; the SWA pool is
smaller than the Full one so allocations also evict SWA. Inserts carry a random
page-aligned ``swa_evicted_seqlen`` (the fresh slots' SWA below it is freed first, as
a request that slid past them would have), so tombstones appear anywhere on a path.
Every match is checked against the SWA validator oracle of ``swa_util``.

Decode appends any number of tokens (filling part-used pages first) and may slide the
window; a request's prefix window may be released early (the opt-in
SGLANG_OPT_RELEASE_PREFILL_SWA path: slide_window itself never releases it).
"""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import HealthCheck, event, settings
from hypothesis.stateful import precondition, rule

from cache import CacheError, EvictParams, InsertParams, RadixKey, UnifiedRadixCache, verify_match
from cache.basics.errors import LockError

from stateful_util import CacheMachineBase, page_tokens
from swa_util import expected_match


def _tombstoned_tokens(cache) -> int:
    return sum(n.tokens for n in cache.snapshot().non_root() if n.components["swa"].tombstone)


class SWACacheMachine(CacheMachineBase):
    page_size = 1
    window = 4
    kv_size = 64
    swa_kv_size = 48

    def __init__(self) -> None:
        super().__init__()
        self.cache = UnifiedRadixCache(
            components=("full", "swa"),
            page_size=self.page_size,
            kv_size=self.kv_size,
            sliding_window=self.window,
            swa_kv_size=self.swa_kv_size,
            device="cpu",
        )
        self.released_rids: set[str] = set()  # requests whose prefix window was released early

    # ---- keys ------------------------------------------------------------------
    def tokens(self, data) -> list[int]:
        return page_tokens(data, self.page_size)

    # ---- tree ops ---------------------------------------------------------------
    @rule(data=st.data(), reuse=st.booleans())
    def insert(self, data, reuse):
        cache = self.cache
        tokens, aligned, slots = self.key_and_slots(data, reuse)
        if slots is None:
            return
        prev, value = slots.prev, slots.value
        evicted = self.swa_floor(data, aligned)
        if evicted > prev:
            cache.free_swa(slots.fresh[: evicted - prev])
        before = cache.available_size("swa")
        gone = _tombstoned_tokens(cache)
        result = cache.insert(InsertParams(RadixKey(tokens), value, prev_prefix_len=prev, swa_evicted_seqlen=evicted))
        # an insert never takes SWA slots from the pool; it only gives back duplicates
        assert cache.available_size("swa") >= before
        if aligned < len(tokens):
            cache.free_kv([value[aligned:]])
        slots.release()
        assert result.prefix_len <= aligned
        tombstones = cache.snapshot().tombstones("swa")
        event(f"insert: tree has SWA tombstones = {tombstones > 0}")
        if _tombstoned_tokens(cache) < gone:
            event("insert: a tombstone recovered")

    @rule(data=st.data(), hold=st.booleans())
    def match(self, data, hold):
        cache = self.cache
        tokens = self.tokens(data)
        want, walked = expected_match(cache.snapshot(), tokens, self.window)
        m = cache.match_prefix(RadixKey(tokens))
        assert m.prefix_len == want and m.full_kv_hit_length == walked
        event(f"match: stopped before the Full hit = {m.prefix_len < walked}")
        assert verify_match(cache, tokens, m) == []
        if hold:
            self.locks.append((m.last_device_node, cache.inc_lock_ref(m.last_device_node)))

    @rule(data=st.data())
    def lock_any_node(self, data):
        node = self.pick(data, sorted(self.cache.tree.nodes))
        self.locks.append((node, self.cache.inc_lock_ref(node)))

    @precondition(lambda self: any(not r.swa_released for _, r in self.locks))
    @rule(data=st.data(), again=st.booleans())
    def release_window(self, data, again):
        cache = self.cache
        held = [(n, r) for n, r in self.locks if not r.swa_released]
        node, receipt = self.pick(data, held)
        full_protected, swa_protected = cache.full_protected_size(), cache.protected_size("swa")
        cache.release_window(node, receipt)
        assert receipt.swa_released
        assert cache.full_protected_size() == full_protected  # the Full lock stays
        assert cache.protected_size("swa") <= swa_protected
        if again:
            try:
                cache.release_window(node, receipt)
            except LockError:
                pass
            else:
                raise AssertionError("a window released twice must be refused")

    @rule(n=st.integers(0, 80), which=st.sampled_from(["full", "swa", "both"]))
    def evict(self, n, which):
        cache = self.cache
        full_n = n if which != "swa" else 0
        swa_n = n if which != "full" else 0
        before = (cache.available_size("full"), cache.available_size("swa"))
        evictable = (cache.full_evictable_size(), cache.evictable_size("swa"))
        result = cache.evict(EvictParams(num_tokens=full_n, swa_num_tokens=swa_n))
        after = (cache.available_size("full"), cache.available_size("swa"))
        assert result.num_tokens_evicted == after[0] - before[0]
        assert result.swa_num_tokens_evicted == after[1] - before[1]
        # every unlocked token is reachable by its component's walk
        assert result.num_tokens_evicted >= min(full_n, evictable[0])
        assert result.swa_num_tokens_evicted >= min(swa_n, evictable[1])
        event(f"evict: tombstoned = {cache.snapshot().tombstones('swa') > 0}")

    # ---- request flows ----------------------------------------------------------
    @rule(data=st.data())
    def new_request(self, data):
        try:
            self.reqs.append(self.cache.new_request(self.tokens(data)))
        except CacheError:
            event("new_request: pool exhausted")

    @precondition(lambda self: self.reqs)
    @rule(data=st.data(), n=st.integers(1, 9), slide=st.booleans())
    def decode(self, data, n, slide):
        cache, ps = self.cache, self.page_size
        req = self.pick(data, self.reqs)
        try:
            cache.extend_request(req, [9000 + len(req.output_ids) + i for i in range(n)])
        except CacheError:
            event("decode: pool exhausted")
            return
        if slide:
            cursor = req.swa_evicted_seqlen
            held = req.lock is not None and not req.lock.swa_released
            cache.slide_window(req)
            event(f"decode: window slid = {req.swa_evicted_seqlen > cursor}")
            assert req.swa_evicted_seqlen >= cursor and req.swa_evicted_seqlen % ps == 0
            # a whole window stays live (the tree-owned prefix counts as evicted)
            assert req.swa_evicted_seqlen <= max(req.cache_protected_len, req.kv_len - self.window)
            if held:  # 0.5.23 default: sliding never releases the prefix lock
                assert not req.lock.swa_released

    @precondition(lambda self: any(r.lock is not None and not r.lock.swa_released for r in self.reqs))
    @rule(data=st.data())
    def release_request_window(self, data):
        """The opt-in early release of a request's prefix window (release_swa_prefix_lock)."""
        cache = self.cache
        reqs = [r for r in self.reqs if r.lock is not None and not r.lock.swa_released]
        req = self.pick(data, reqs)
        full_protected = cache.full_protected_size()
        cache.release_window(req.last_node, req.lock)
        assert req.lock.swa_released and cache.full_protected_size() == full_protected
        self.released_rids.add(req.rid)
        event("request window released")

    @precondition(lambda self: self.reqs)
    @rule(data=st.data())
    def chunk(self, data):
        req = self.pick(data, self.reqs)
        branch, protected_before = req.swa_branching_seqlen, req.cache_protected_len
        self.cache.checkpoint(req)
        assert req.swa_evicted_seqlen % self.page_size == 0
        protected = req.cache_protected_len
        m = self.cache.match_prefix(RadixKey(req.fill_ids[:protected]))
        if branch is not None and protected_before < branch <= req.kv_len:
            # v0.5.23: the first checkpoint after a match whose Full hit ran past its last
            # live window stops at that branch point (live SWA there is not guaranteed)
            assert protected == branch and req.swa_branching_seqlen is None
            event("chunk: branch checkpoint")
        elif req.rid not in self.released_rids:
            # while its window lock was held all along, the cached tail keeps a live
            # window (never an all-tombstone last leaf): the whole cached prefix matches
            assert m.prefix_len == protected
        assert verify_match(self.cache, req.fill_ids, m) == []

    @precondition(lambda self: self.reqs)
    @rule(data=st.data(), insert=st.booleans())
    def finish(self, data, insert):
        req = self.reqs.pop(data.draw(st.integers(0, len(self.reqs) - 1)))
        self.cache.release_kv_cache(req, checkpoint=insert)


class PagedSWACacheMachine(SWACacheMachine):
    page_size = 4
    window = 4
    kv_size = 160
    swa_kv_size = 128


class SmallWindowSWACacheMachine(SWACacheMachine):
    """The window is smaller than a page."""

    page_size = 4
    window = 2
    kv_size = 160
    swa_kv_size = 128


_settings = settings(max_examples=60, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TestSWAStateful = SWACacheMachine.TestCase
TestSWAStateful.settings = _settings
TestPagedSWAStateful = PagedSWACacheMachine.TestCase
TestPagedSWAStateful.settings = _settings
TestSmallWindowSWAStateful = SmallWindowSWACacheMachine.TestCase
TestSmallWindowSWAStateful.settings = _settings
