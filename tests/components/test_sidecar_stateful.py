"""Hypothesis stateful test for the sidecar: random inserts, matches, locks, evictions
and request flows on FULL+SIDECAR and FULL+SWA+SIDECAR, the full invariant sweep and
the incremental probe after every step, every match proved by its fingerprints.

Keys come from a few shared stems with a small stride (3) and a small entry pool, so
nodes split across stride boundaries, entries move up on splits and the pool keeps
evicting for itself. Every match is also checked against a direct oracle: the deepest
walked node whose end is a stride boundary and that holds entries (and, with SWA, that
the SWA validator accepts too; the real walk has the last word there).
"""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import invariant, precondition, rule

from cache import CacheError, EvictParams, InsertParams, RadixKey, UnifiedRadixCache, check_invariants, verify_match

from stateful_util import CacheMachineBase

STEMS = [[1, 2, 3], [1, 2, 3, 4, 5, 6], [1, 2, 7], [8, 9, 10, 11]]
STRIDE = 3


class SidecarCacheMachine(CacheMachineBase):
    components = ("full", "sidecar")
    kv_size = 96
    sidecar_size = 8
    drain_evicts = ("full",)  # the entries must go with the Full nodes

    def __init__(self) -> None:
        super().__init__()
        extra = {"sliding_window": 5, "swa_kv_size": 80} if "swa" in self.components else {}
        self.cache = UnifiedRadixCache(components=self.components, kv_size=self.kv_size, sidecar_stride=STRIDE,
                                       sidecar_size=self.sidecar_size, device="cpu", **extra)
        self.cache.tree.take_touched()

    def tokens(self, data) -> list[int]:
        stem = STEMS[data.draw(st.integers(0, len(STEMS) - 1))]
        return stem + data.draw(st.lists(st.integers(1, 3), max_size=8))

    @rule(data=st.data())
    def insert(self, data):
        cache, tokens = self.cache, self.tokens(data)
        try:
            slots = cache.alloc_kv(len(tokens))
        except CacheError:
            return
        cache.write_kv(slots, tokens)
        cache.insert(InsertParams(RadixKey(tokens), slots))

    @rule(data=st.data(), lock=st.booleans())
    def match(self, data, lock):
        cache, tokens = self.cache, self.tokens(data)
        want = self._oracle(tokens) if "swa" not in self.components else None
        result = cache.match_prefix(RadixKey(tokens))
        assert verify_match(cache, tokens, result) == []
        if want is not None:
            assert result.prefix_len == want
        assert result.prefix_len % STRIDE == 0
        if lock:
            self.locks.append((result.last_device_node, cache.inc_lock_ref(result.last_device_node)))

    def _oracle(self, tokens: list[int]) -> int:
        """Deepest node on the walk that ends on a stride boundary and holds entries."""
        tree, i = self.cache.tree, self.cache.by_name["sidecar"].index
        node, walked, best = tree.root, 0, 0
        while walked < len(tokens):
            child = next((c for c in node.children.values() if c.token_ids[0] == tokens[walked]), None)
            if child is None:
                break
            shared = 0
            for a, b in zip(child.token_ids, tokens[walked:]):
                if a != b:
                    break
                shared += 1
            if shared < child.length:  # the match splits here: the upper part keeps what ends above the cut
                end = walked + shared
                if end % STRIDE == 0 and child.data[i].value is not None and end // STRIDE > walked // STRIDE:
                    best = end
                break
            walked += child.length
            if walked % STRIDE == 0 and child.data[i].value is not None:
                best = walked
            node = child
        return best

    @rule(full=st.integers(0, 12), entries=st.integers(0, 4))
    def evict(self, full, entries):
        self.cache.evict(EvictParams.of({"full": full, "sidecar": entries}))

    @precondition(lambda self: len(self.reqs) < 3)
    @rule(data=st.data())
    def request(self, data):
        try:
            self.reqs.append(self.cache.new_request(self.tokens(data)))
        except CacheError:
            pass

    @precondition(lambda self: self.reqs)
    @rule(data=st.data(), finish=st.booleans(), grow=st.integers(0, 4))
    def step_request(self, data, finish, grow):
        req = self.pick(data, self.reqs)
        try:
            if grow:
                self.cache.extend_request(req, [1 + k % 3 for k in range(grow)])
            if finish:
                self.cache.release_kv_cache(req)
                self.reqs.remove(req)
            else:
                self.cache.checkpoint(req)
        except CacheError:
            pass

    @invariant()
    def consistent(self):  # the incremental probe (the full sweep: invariants_hold, run after it)
        cache = self.cache
        assert check_invariants(cache, touched=cache.tree.take_touched()) == []


class SWASidecarCacheMachine(SidecarCacheMachine):
    components = ("full", "swa", "sidecar")


_settings = settings(max_examples=40, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TestSidecarStateful = SidecarCacheMachine.TestCase
TestSidecarStateful.settings = _settings
TestSWASidecarStateful = SWASidecarCacheMachine.TestCase
TestSWASidecarStateful.settings = _settings
