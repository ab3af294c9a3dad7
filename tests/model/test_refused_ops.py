"""Refused scenario ops give back everything they took and leave the state exactly as
before: each call of each op fails in turn.

A scenario op is a sequence of cache calls (insert: check, allocate, write, free the
SWA below the floor, take a Mamba state, insert, return the tail). These tests make
each call of each op fail in turn, first at the CacheDriver's cache calls, then at the
pools' allocators (which reaches the allocations inside the controller's request
flows), and compare the whole state before and after. Real refusals, pool by pool,
are in ``test_refused_pools.py``.
"""

from __future__ import annotations

import contextlib
import inspect

import pytest
from refused_util import assert_same, deep_state

from cache import CacheError, Cause, EventLog, UnifiedRadixCache, check_invariants
from cache.basics.errors import DoubleFreeError, LockError, PoolExhaustedError, UnknownNodeError
from workbench.model.timeline.driver import CacheDriver

# ---- part (a): every call of every op fails in turn -----------------------------

BASE = dict(kv_size=512, device="cpu")
CONFIGS = {
    "full-p1": dict(components=("full",), page_size=1),
    "full-p4": dict(components=("full",), page_size=4),
    "swa-p1": dict(components=("full", "swa"), sliding_window=4, page_size=1),
    "swa-p4": dict(components=("full", "swa"), sliding_window=4, page_size=4),
    "mamba-p1": dict(components=("full", "mamba"), mamba_size=16, page_size=1),
    "mamba-p4": dict(components=("full", "mamba"), mamba_size=16, page_size=4),
    "swa-mamba-p1": dict(components=("full", "swa", "mamba"), sliding_window=4, mamba_size=16, page_size=1),
    "swa-mamba-p4": dict(components=("full", "swa", "mamba"), sliding_window=4, mamba_size=16, page_size=4),
}

A = list(range(1, 17))  # 16 tokens: 4 pages at page size 4
R = A + list(range(200, 254))  # 70 tokens: a part-used last page at page 4; a Mamba checkpoint at 64


def build(config: dict) -> CacheDriver:
    """A small tree ([A], [A B] locked as ``l``, a match ``a`` on A) and a running
    request ``r`` that shares A; the pools have ample room, so no op below evicts."""
    driver = CacheDriver(UnifiedRadixCache(**BASE, **config))
    for op, fields in [
        ("insert", {"key": A}),
        ("insert", {"key": A + list(range(100, 108))}),
        ("match", {"key": A + list(range(100, 108)), "as": "m"}),
        ("lock", {"match": "m", "as": "l"}),
        ("match", {"key": A + [999], "as": "a"}),
        ("req_prefill", {"req": "r", "tokens": R}),
    ]:
        driver.run(op, fields)
    assert check_invariants(driver.cache) == []
    return driver


SWA_ONLY = "swa"
# (case id, op, fields, needs): every op kind, with and without its optional parts
CASES = [
    ("insert", "insert", {"key": A + list(range(300, 306))}, None),  # unaligned at page 4
    ("insert-split", "insert", {"key": A[:8] + list(range(400, 404))}, None),
    ("insert-new", "insert", {"key": list(range(450, 462))}, None),
    ("insert-floor", "insert", {"key": list(range(500, 516)), "swa_evicted_seqlen": 8}, SWA_ONLY),
    ("match", "match", {"key": A[:8] + [9999], "as": "m2"}, None),  # splits A
    ("lock", "lock", {"match": "a", "as": "l2"}, None),
    ("unlock", "unlock", {"lock": "l"}, None),
    ("release_window", "release_window", {"lock": "l"}, SWA_ONLY),
    ("evict", "evict", {"full": 4}, None),
    ("req_prefill", "req_prefill", {"req": "q", "tokens": A + list(range(600, 610))}, None),
    ("req_prefill-cold", "req_prefill", {"req": "q", "tokens": list(range(700, 710))}, None),
    ("req_decode-1", "req_decode", {"req": "r", "tokens": [800]}, None),  # fits the last page at 4 (70 tokens)
    ("req_decode-6", "req_decode", {"req": "r", "tokens": list(range(800, 806))}, None),
    ("req_decode-slide", "req_decode", {"req": "r", "tokens": list(range(800, 806)), "slide_window": True}, SWA_ONLY),
    ("req_chunk", "req_chunk", {"req": "r"}, None),
    ("req_finish", "req_finish", {"req": "r"}, None),
    ("req_finish-no-insert", "req_finish", {"req": "r", "insert": False}, None),
]

# the error each cache call could raise on its own
CALL_ERRORS = {
    "check_capacity": PoolExhaustedError,
    "alloc_kv": PoolExhaustedError,
    "alloc_mamba_state": PoolExhaustedError,
    "new_request": PoolExhaustedError,
    "extend_request": PoolExhaustedError,
    "checkpoint": PoolExhaustedError,
    "free_kv": DoubleFreeError,
    "free_swa": DoubleFreeError,
    "free_mamba_state": DoubleFreeError,
    "inc_lock_ref": UnknownNodeError,
    "dec_lock_ref": LockError,
    "release_window": LockError,
}
# calls that only hand back what the op took and the tree did not keep
RETURNS = {"free_kv", "free_mamba_state"}


class FaultyCache:
    """Stands in for the driver's cache: records every cache method the op calls and
    makes call number ``fail_at`` raise, instead of running, the error it could raise."""

    def __init__(self, cache: UnifiedRadixCache, fail_at: int | None = None) -> None:
        self._cache, self._fail_at, self.calls = cache, fail_at, []

    def __getattr__(self, name: str):
        attr = getattr(self._cache, name)
        if not inspect.ismethod(attr) or name == "scheduler_step":  # the step's scope, no cache op
            return attr

        def call(*args, **kwargs):
            k = len(self.calls)
            self.calls.append(name)
            if k == self._fail_at:
                raise CALL_ERRORS.get(name, CacheError)(f"injected: {name} refused")
            return attr(*args, **kwargs)

        return call


@contextlib.contextmanager
def faulty_allocators(cache: UnifiedRadixCache, fail_at: int | None = None):
    """Every pool's allocator (Full, SWA, Mamba) records its allocations; number
    ``fail_at`` is refused as an exhausted pool would refuse it."""
    allocators = [cache.kv_pool] + [c.pool.allocator for c in cache.components[1:]]
    calls: list[str] = []
    for allocator in allocators:
        def alloc(n, real=allocator.alloc, name=allocator.name):
            k = len(calls)
            calls.append(name)
            if k == fail_at:
                raise PoolExhaustedError(f"injected: {name} pool refused")
            return real(n)

        allocator.alloc = alloc
    try:
        yield calls
    finally:
        for allocator in allocators:
            del allocator.alloc


def _case_params():
    for cfg_id, config in CONFIGS.items():
        for case_id, op, fields, needs in CASES:
            if needs == SWA_ONLY and "swa" not in config["components"]:
                continue
            yield pytest.param(config, op, fields, id=f"{cfg_id}-{case_id}")


def clean_run(config: dict, op: str, fields: dict) -> tuple[list[str], list[str]]:
    """The op's cache calls and pool allocations when nothing fails; it must succeed
    without evicting anything (so every refusal below is an injected one)."""
    driver = build(config)
    log = EventLog(driver.cache.events)
    real = driver.cache
    proxy = FaultyCache(real)
    driver.cache = proxy
    with faulty_allocators(real) as allocs:
        driver.run(op, fields)
    driver.cache = real
    if op != "evict":
        assert [e for e in log.take() if e.cause is Cause.CAPACITY] == []
    assert check_invariants(real) == []
    return proxy.calls, list(allocs)


@pytest.mark.parametrize("config, op, fields", list(_case_params()))
def test_each_cache_call_of_an_op_fails_in_turn(config, op, fields):
    calls, _ = clean_run(config, op, fields)
    assert calls, "the op made no cache call"
    commit = max(i for i, name in enumerate(calls) if name not in RETURNS)
    for k, name in enumerate(calls):
        if k > commit:
            # After the commit (cache.insert) only returns are left: the unaligned tail
            # and a duplicate Mamba state go back to their pools. A pool refuses a
            # return only on a double free, i.e. a bug, not a refusal, and nothing could
            # take a committed insert back out of the tree: not a refusal point.
            assert name in RETURNS
            continue
        driver = build(config)
        real = driver.cache
        before = deep_state(real, driver)
        driver.cache = FaultyCache(real, fail_at=k)
        with pytest.raises(CacheError, match=f"injected: {name} refused"):
            driver.run(op, fields)
        driver.cache = real
        assert check_invariants(real) == []
        assert_same(before, deep_state(real, driver))


@pytest.mark.parametrize("config, op, fields", list(_case_params()))
def test_each_pool_allocation_of_an_op_fails_in_turn(config, op, fields):
    _, allocs = clean_run(config, op, fields)
    if op in ("insert", "req_prefill") or (op == "req_decode" and len(fields["tokens"]) > 1):
        assert allocs, "the op should allocate"
    if op == "req_chunk" and "mamba" in config["components"]:
        assert "mamba" in allocs  # the state donated to the tree (page 1) or its replacement
    for k, pool in enumerate(allocs):
        driver = build(config)
        real = driver.cache
        before = deep_state(real, driver)
        with faulty_allocators(real, fail_at=k):
            with pytest.raises(PoolExhaustedError, match=f"injected: {pool} pool refused"):
                driver.run(op, fields)
        assert check_invariants(real) == []
        assert_same(before, deep_state(real, driver))


def test_allocations_the_ops_make_are_the_ones_expected():
    """Guards the two tests above against going vacuous: what each op allocates."""
    assert clean_run(CONFIGS["mamba-p4"], "req_prefill", {"req": "q", "tokens": A + [600, 601, 602, 603]})[1] == [
        "mamba", "mamba", "mamba", "full"]  # running state, two ping-pong slots, then KV
    assert clean_run(CONFIGS["swa-p1"], "insert", {"key": [1, 2, 3]})[1] == ["full", "swa"]
    calls, allocs = clean_run(CONFIGS["swa-mamba-p1"], "insert", {"key": [5, 6, 7]})
    assert calls == ["check_capacity", "alloc_kv", "write_kv", "alloc_mamba_state", "insert"]
    assert allocs == ["full", "swa", "mamba"]
    assert clean_run(CONFIGS["full-p4"], "req_decode", {"req": "r", "tokens": [1]})[1] == []  # the last page's rest
    assert clean_run(CONFIGS["full-p4"], "req_decode", {"req": "r", "tokens": [1, 2, 3]})[1] == ["full"]


@pytest.mark.parametrize("components, tokens, prefix, allocs", [
    (("full",), [1, 2, 3, 4, 40, 41, 42, 43, 44, 45], (1, 2, 3, 4), ["full"]),  # the match splits [1..6]
    (("full", "mamba"), [1, 2, 3, 4, 5, 6, 30, 31, 32, 33], (1, 2, 3, 4, 5, 6), ["mamba", "full"]),
], ids=["full-split", "mamba-cow"])
def test_a_fault_after_an_admission_had_to_evict_leaves_no_leak(components, tokens, prefix, allocs):
    """When admission needs eviction, the prefix is matched and locked before the
    allocation (so eviction cannot take it). The room was checked, so only a fault
    can fail after that; then the slots, the copied state and the lock go back, but
    the match's split and LRU refresh, and the eviction already done, cannot be
    undone (the tree has no un-split and the evicted KV is gone). So compare what can
    be compared: no violation, no leaked slot, no lock, no request, the matched prefix
    still cached, and every surviving node holding what it held."""

    def start() -> CacheDriver:
        driver = CacheDriver(UnifiedRadixCache(components=components, kv_size=16, mamba_size=4, device="cpu"))
        driver.run("insert", {"key": [1, 2, 3, 4, 5, 6]})
        driver.run("insert", {"key": [20, 21, 22, 23, 24, 25, 26, 27]})
        return driver

    driver = start()
    log = EventLog(driver.cache.events)
    with faulty_allocators(driver.cache) as calls:
        driver.run("req_prefill", {"req": "x", "tokens": tokens})
    assert calls == allocs  # (with Mamba: the copy-on-write slot during the match) then KV, after evicting
    assert any(e.cause is Cause.CAPACITY for e in log.take())
    for k in range(len(allocs)):
        driver = start()
        cache = driver.cache
        before = cache.snapshot()
        with faulty_allocators(cache, fail_at=k):
            with pytest.raises(PoolExhaustedError, match="injected"):
                driver.run("req_prefill", {"req": "x", "tokens": tokens})
        after = cache.snapshot()
        assert check_invariants(cache) == []
        assert after.requests == () and driver.reqs == {}
        for name, pool in after.pools.items():
            was = before.pools[name]
            assert pool.held == 0 and pool.protected == 0
            assert pool.available + pool.evictable == was.available + was.evictable  # nothing leaked
        assert prefix in {n.path for n in after.non_root()}
        old = {n.id: n for n in before.non_root()}
        for node in after.non_root():
            assert all(c.lock_ref == 0 for c in node.components.values())
            if node.id in old:
                assert node.path[-1] == old[node.id].path[-1]
                assert node.components["full"].value_len <= old[node.id].components["full"].value_len
