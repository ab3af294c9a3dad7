"""Hypothesis stateful test: random op sequences, invariants after every step.

Keys come from a tiny alphabet over a few shared stems, so sequences constantly share
prefixes, split nodes, hit duplicates and fight over a small pool.
"""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import precondition, rule

from cache import CacheError, EvictParams, InsertParams, RadixKey, UnifiedRadixCache, verify_match

from conftest import take_request_slots
from stateful_util import STEMS, CacheMachineBase

keys = st.builds(lambda stem, tail: STEMS[stem] + tail, st.integers(0, len(STEMS) - 1), st.lists(st.integers(1, 4), max_size=10))


class CacheMachine(CacheMachineBase):
    page_size = 1
    kv_size = 64

    def __init__(self) -> None:
        super().__init__()
        self.cache = UnifiedRadixCache(page_size=self.page_size, kv_size=self.kv_size, device="cpu")

    @rule(tokens=keys, reuse=st.booleans())
    def insert(self, tokens, reuse):
        cache = self.cache
        slots = take_request_slots(cache, tokens, reuse)
        if slots is None:
            return
        result = cache.insert(InsertParams(RadixKey(tokens), slots.value, prev_prefix_len=slots.prev))
        aligned = len(tokens) - len(tokens) % self.page_size
        if aligned < len(tokens):
            cache.free_kv([slots.value[aligned:]])
        slots.release()
        assert result.prefix_len <= aligned

    @rule(tokens=keys, hold=st.booleans())
    def match(self, tokens, hold):
        m = self.cache.match_prefix(RadixKey(tokens))
        assert verify_match(self.cache, tokens, m) == []
        if hold:
            self.locks.append((m.last_device_node, self.cache.inc_lock_ref(m.last_device_node)))

    @rule(n=st.integers(0, 80))
    def evict(self, n):
        before = self.cache.full_evictable_size()
        result = self.cache.evict(EvictParams(num_tokens=n))
        assert result.num_tokens_evicted == before - self.cache.full_evictable_size()
        assert result.num_tokens_evicted >= min(n, before)

    @rule(tokens=keys)
    def new_request(self, tokens):
        try:
            self.reqs.append(self.cache.new_request(tokens))
        except CacheError:
            pass

    @precondition(lambda self: self.reqs)
    @rule(data=st.data(), tokens=st.lists(st.integers(1, 4), min_size=1, max_size=5))
    def decode(self, data, tokens):
        req = self.pick(data, self.reqs)
        try:
            self.cache.extend_request(req, tokens)
        except CacheError:
            pass

    @precondition(lambda self: self.reqs)
    @rule(data=st.data())
    def chunk(self, data):
        self.cache.checkpoint(self.pick(data, self.reqs))

    @precondition(lambda self: self.reqs)
    @rule(data=st.data(), insert=st.booleans())
    def finish(self, data, insert):
        req = self.reqs.pop(data.draw(st.integers(0, len(self.reqs) - 1)))
        self.cache.release_kv_cache(req, checkpoint=insert)


class PagedCacheMachine(CacheMachine):
    page_size = 4
    kv_size = 128


_settings = settings(max_examples=60, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TestCacheStateful = CacheMachine.TestCase
TestCacheStateful.settings = _settings
TestPagedCacheStateful = PagedCacheMachine.TestCase
TestPagedCacheStateful.settings = _settings
