"""Seeded random runs of the host tier on small pools, per component set, write
policy, page size and transfer mode: inserts (some with an SWA window floor), matches
verified by fingerprint, locks, device and host evictions of every component,
load-backs and flushes, with every invariant checked after every op. (The Hypothesis
machines in test_hicache_stateful.py shrink what these find; these run longer.)"""

from __future__ import annotations

import random

import pytest

from cache import EvictParams, InsertParams, RadixKey, UnifiedRadixCache, check_invariants, verify_match
from cache.basics.errors import PoolExhaustedError

CASES = [  # (components, page size)
    (("full",), 1), (("full",), 4), (("full", "mamba"), 1), (("full", "swa"), 1), (("full", "swa"), 4),
    (("full", "swa", "mamba"), 1),
    # the sidecar's host part (components/sidecar_host.py): alone, paged, and ranked between SWA and Mamba
    (("full", "sidecar"), 1), (("full", "sidecar"), 4), (("full", "swa", "sidecar", "mamba"), 1),
]


def make(components, page_size: int, policy: str, transfers: str) -> UnifiedRadixCache:
    swa, mamba = "swa" in components, "mamba" in components
    host = {"write_policy": policy, "transfers": transfers, "load_back_threshold": page_size, "host_kv_size": 40}
    if swa:
        host["host_swa_size"] = 24
    if mamba:
        host["host_mamba_size"] = 5
    own = {}
    if "sidecar" in components:  # strides of 2 tokens (one page at page size 4): entries on most nodes
        host["host_sidecar_size"] = 10
        own = {"sidecar_stride": max(2, page_size), "sidecar_size": 12}
    return UnifiedRadixCache(kv_size=48, page_size=page_size, components=components, device="cpu",
                             sliding_window=4 if swa else None, swa_kv_size=32 if swa else None,
                             mamba_size=8 if mamba else None, hicache=host, **own)


def insert(cache, tokens: list[int], floor: int) -> None:
    mamba = "mamba" in cache.by_name
    cache.check_capacity(len(tokens), mamba_states=1 if mamba else 0)
    slots = cache.alloc_kv(len(tokens))
    cache.write_kv(slots, tokens)
    if floor:
        cache.free_swa(slots[:floor])
    aligned = len(tokens) - len(tokens) % cache.page_size
    state = cache.alloc_mamba_state(tokens[:aligned]) if mamba else None
    result = cache.insert(InsertParams(RadixKey(tokens), slots, state, swa_evicted_seqlen=floor))
    if aligned < len(tokens):
        cache.free_kv([slots[aligned:]])
    if state is not None and result.mamba_exist:
        cache.free_mamba_state(state)


@pytest.mark.parametrize("components, page_size", CASES)
@pytest.mark.parametrize("policy", ["write_through", "write_through_selective", "write_back"])
@pytest.mark.parametrize("transfers", ["immediate", "held"])
def test_random_operations_keep_every_invariant(components, page_size, policy, transfers):
    rng = random.Random(f"{components}-{page_size}-{policy}-{transfers}")
    cache = make(components, page_size, policy, transfers)
    ps = page_size
    prompts = [[rng.randrange(1, 6) for _ in range(rng.randrange(1, 4) * ps)] for _ in range(6)]
    names = list(components)
    locks, peak, used = [], 0, {}
    for step in range(250):
        tokens = rng.choice(prompts) + [rng.randrange(1, 6) for _ in range(rng.randrange(0, 3) * ps)]
        op = rng.choice(["insert", "insert", "match", "lock", "unlock", "evict", "evict", "evict_host", "evict_host",
                         "load_back", "flush"])
        try:
            if op == "insert":
                floor = rng.choice([0, 0, len(tokens) // 2 // ps * ps]) if "swa" in components else 0
                insert(cache, tokens, floor)
            elif op == "match":
                m = cache.match_prefix(RadixKey(tokens))
                assert verify_match(cache, tokens, m) == [], step
            elif op == "lock":
                m = cache.match_prefix(RadixKey(tokens))
                locks.append((m.last_device_node, cache.inc_lock_ref(m.last_device_node)))
            elif op == "unlock" and locks:
                cache.dec_lock_ref(*locks.pop(rng.randrange(len(locks))))
            elif op == "evict":
                name = rng.choice(names)
                cache.evict(EvictParams.of({name: rng.randrange(1, 3 if name == "mamba" else 16)}))
            elif op == "evict_host":
                name = rng.choice(names)
                cache.evict_host(rng.randrange(1, 3 if name == "mamba" else 16), name)
            elif op == "load_back":
                cache.load_back(RadixKey(tokens))
            elif op == "flush":
                cache.check_hicache_events()
        except PoolExhaustedError:
            pass  # everything locked: refused, nothing changed
        violations = check_invariants(cache)
        assert violations == [], (step, op, [str(v) for v in violations])
        peak = max(peak, cache.host.kv.size - cache.host_available_size())
        for name, pool in cache.host.aux.items():
            used[name] = max(used.get(name, 0), pool.size - pool.available_size())
    assert peak > 0 and all(used.values()), used  # the host tier was used, by every component
