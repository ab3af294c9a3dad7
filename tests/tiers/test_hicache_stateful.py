"""Hypothesis stateful test of the host tier, per component set and write policy:
random inserts (some with an SWA window floor), matches (verified by fingerprint),
locks, device and host evictions of every component, load-backs and flushes, with
transfers held in flight; every invariant after every step."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from cache import EvictParams, InsertParams, RadixKey, UnifiedRadixCache, check_invariants, verify_match
from cache.basics.errors import PoolExhaustedError

STEMS = [[1, 2, 3, 4], [1, 2, 5, 6], [7, 8, 9, 10], [1, 2, 3, 4, 11, 12, 13, 14]]
keys = st.builds(lambda stem, tail: STEMS[stem] + tail, st.integers(0, len(STEMS) - 1),
                 st.lists(st.integers(1, 4), max_size=8))


class HostTierMachine(RuleBasedStateMachine):
    components: tuple[str, ...] = ("full",)
    policy = "write_through"

    def __init__(self) -> None:
        super().__init__()
        comps = self.components
        host = {"write_policy": self.policy, "load_back_threshold": 2, "transfers": "held", "host_kv_size": 40}
        if "swa" in comps:
            host["host_swa_size"] = 24
        if "mamba" in comps:
            host["host_mamba_size"] = 4
        own = {"sidecar_stride": 2, "sidecar_size": 10} if "sidecar" in comps else {}
        if own:
            host["host_sidecar_size"] = 8
        self.cache = UnifiedRadixCache(kv_size=48, components=comps, device="cpu",
                                       sliding_window=4 if "swa" in comps else None,
                                       swa_kv_size=32 if "swa" in comps else None,
                                       mamba_size=6 if "mamba" in comps else None, hicache=host, **own)
        self.locks: list = []

    @rule(tokens=keys, floor=st.booleans())
    def insert(self, tokens, floor):
        cache, mamba = self.cache, "mamba" in self.components
        floor = len(tokens) // 2 if floor and "swa" in self.components else 0
        try:
            cache.check_capacity(len(tokens), mamba_states=1 if mamba else 0)
        except PoolExhaustedError:
            return  # everything locked: nothing to take
        slots = cache.alloc_kv(len(tokens))
        cache.write_kv(slots, tokens)
        if floor:
            cache.free_swa(slots[:floor])
        state = cache.alloc_mamba_state(tokens) if mamba else None
        result = cache.insert(InsertParams(RadixKey(tokens), slots, state, swa_evicted_seqlen=floor))
        if state is not None and result.mamba_exist:
            cache.free_mamba_state(state)

    @rule(tokens=keys, hold=st.booleans())
    def match(self, tokens, hold):
        m = self.cache.match_prefix(RadixKey(tokens))
        assert verify_match(self.cache, tokens, m) == []
        assert m.host_hit_length >= 0 and m.prefix_len <= m.full_kv_hit_length
        if hold:
            self.locks.append((m.last_device_node, self.cache.inc_lock_ref(m.last_device_node)))

    @precondition(lambda self: self.locks)
    @rule(data=st.data())
    def unlock(self, data):
        self.cache.dec_lock_ref(*self.locks.pop(data.draw(st.integers(0, len(self.locks) - 1))))

    @rule(data=st.data())
    def evict(self, data):
        name = data.draw(st.sampled_from(self.components))
        self.cache.evict(EvictParams.of({name: data.draw(st.integers(1, 3 if name == "mamba" else 20))}))

    @rule(data=st.data())
    def evict_host(self, data):
        name = data.draw(st.sampled_from(self.components))
        free = self.cache.host_available_size(name)
        n = data.draw(st.integers(0, 3 if name == "mamba" else 20))
        freed = self.cache.evict_host(n, name)
        assert self.cache.host_available_size(name) >= free + min(freed, 1) - 1  # never takes host slots

    @rule(tokens=keys)
    def load_back(self, tokens):
        try:
            result = self.cache.load_back(RadixKey(tokens))
        except PoolExhaustedError:
            return
        if result.loaded:
            m = self.cache.match_prefix(RadixKey(tokens))
            assert m.host_hit_length == 0 or "swa" in self.components  # SWA may leave older windows on the host
            assert verify_match(self.cache, tokens, m) == []

    @rule()
    def flush(self):
        self.cache.check_hicache_events()
        assert self.cache.host.in_flight == []

    @invariant()
    def invariants_hold(self):
        assert check_invariants(self.cache) == []


SETTINGS = settings(max_examples=25, stateful_step_count=30, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow], derandomize=True)
for components in [("full",), ("full", "swa"), ("full", "mamba"), ("full", "swa", "mamba"), ("full", "sidecar")]:
    for policy in ("write_through", "write_through_selective", "write_back"):
        name = "Test" + "".join(c.title() for c in components) + "".join(p.title() for p in policy.split("_"))
        machine = type(name + "Machine", (HostTierMachine,), {"components": components, "policy": policy})
        globals()[name] = SETTINGS(machine).TestCase
