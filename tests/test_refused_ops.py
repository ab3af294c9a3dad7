"""Refused scenario ops give back everything they took and leave the state exactly as
before.

A scenario op is a sequence of cache calls (insert: check, allocate, write, free the
SWA below the floor, take a Mamba state, insert, return the tail). Part (a) makes each
call of each op fail in turn, first at the Session's cache calls, then at the pools'
allocators (which reaches the allocations inside the controller's request flows), and
compares the whole state before and after. Part (b) drives real refusals: every pool
(Full, SWA, Mamba) too small for every op that allocates from it, through the runner,
and checks that the scenario carries on cleanly afterwards.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import textwrap

import pytest

from cache import CacheError, Cause, EventLog, UnifiedRadixCache, check_invariants
from cache.errors import DoubleFreeError, LockError, PoolExhaustedError, UnknownNodeError
from workbench.model.runner import Runner
from workbench.model.scenario import load_scenario
from workbench.model.session import Session

# ---- the whole state, beyond the snapshot ---------------------------------------


def _req_state(cache, req) -> tuple:
    mamba = cache.by_name.get("mamba")
    # a failed op must not have overwritten a running (or tracked) state
    states = () if mamba is None else tuple(int(mamba.pool.fingerprint[s]) for s in mamba.held_slots(req))
    return (
        req.kv_indices.tolist(), list(req.output_ids), req.cache_protected_len, req.cache_inserted_len,
        req.last_node, None if req.lock is None else req.lock.receipt_id, req.swa_evicted_seqlen,
        req.swa_branching_seqlen, None if req.mamba_pool_idx is None else req.mamba_pool_idx.tolist(),
        None if req.mamba_ping_pong is None else req.mamba_ping_pong.tolist(), req.mamba_next_track_idx,
        req.mamba_last_track_seqlen, req.mamba_prev_track_seqlen, req.released, states,
    )


def deep_state(cache: UnifiedRadixCache, session: Session | None = None) -> dict:
    """The snapshot (op_seq aside, as the runner's same_state compares it) plus what it
    does not show: which pages are free in every pool, the Full->SWA translation
    table, every running request's row and state slots, and the session's names."""
    state = {"snapshot": dataclasses.replace(cache.snapshot(), op_seq=0)}
    state["free.full"] = sorted(cache.kv_pool.free_pages_list())
    for component in cache.components[1:]:
        state[f"free.{component.name}"] = sorted(component.pool.allocator.free_pages_list())
    if "swa" in cache.by_name:
        state["swa.mapping"] = cache.by_name["swa"].pool.mapping.tolist()
    state["requests"] = {rid: _req_state(cache, req) for rid, req in cache.requests.items()}
    if session is not None:
        names = (session.matches, session.locks, session.released, session.reqs, session.finished)
        state["names"] = tuple(sorted(d) for d in names)
    return state


def assert_same(before: dict, after: dict) -> None:
    for key in before:
        assert after[key] == before[key], f"{key} changed"
    assert after == before


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


def build(config: dict) -> Session:
    """A small tree ([A], [A B] locked as ``l``, a match ``a`` on A) and a running
    request ``r`` that shares A; the pools have ample room, so no op below evicts."""
    session = Session(UnifiedRadixCache(**BASE, **config))
    for op, fields in [
        ("insert", {"key": A}),
        ("insert", {"key": A + list(range(100, 108))}),
        ("match", {"key": A + list(range(100, 108)), "as": "m"}),
        ("lock", {"match": "m", "as": "l"}),
        ("match", {"key": A + [999], "as": "a"}),
        ("req_prefill", {"req": "r", "tokens": R}),
    ]:
        session.run(op, fields)
    assert check_invariants(session.cache) == []
    return session


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
    "cache_unfinished_req": PoolExhaustedError,
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
    """Stands in for the session's cache: records every cache method the op calls and
    makes call number ``fail_at`` raise, instead of running, the error it could raise."""

    def __init__(self, cache: UnifiedRadixCache, fail_at: int | None = None) -> None:
        self._cache, self._fail_at, self.calls = cache, fail_at, []

    def __getattr__(self, name: str):
        attr = getattr(self._cache, name)
        if not inspect.ismethod(attr):
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
    session = build(config)
    log = EventLog(session.cache.events)
    real = session.cache
    proxy = FaultyCache(real)
    session.cache = proxy
    with faulty_allocators(real) as allocs:
        session.run(op, fields)
    session.cache = real
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
        session = build(config)
        real = session.cache
        before = deep_state(real, session)
        session.cache = FaultyCache(real, fail_at=k)
        with pytest.raises(CacheError, match=f"injected: {name} refused"):
            session.run(op, fields)
        session.cache = real
        assert check_invariants(real) == []
        assert_same(before, deep_state(real, session))


@pytest.mark.parametrize("config, op, fields", list(_case_params()))
def test_each_pool_allocation_of_an_op_fails_in_turn(config, op, fields):
    _, allocs = clean_run(config, op, fields)
    if op in ("insert", "req_prefill") or (op == "req_decode" and len(fields["tokens"]) > 1):
        assert allocs, "the op should allocate"
    if op == "req_chunk" and "mamba" in config["components"]:
        assert "mamba" in allocs  # the state donated to the tree (page 1) or its replacement
    for k, pool in enumerate(allocs):
        session = build(config)
        real = session.cache
        before = deep_state(real, session)
        with faulty_allocators(real, fail_at=k):
            with pytest.raises(PoolExhaustedError, match=f"injected: {pool} pool refused"):
                session.run(op, fields)
        assert check_invariants(real) == []
        assert_same(before, deep_state(real, session))


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

    def start() -> Session:
        session = Session(UnifiedRadixCache(components=components, kv_size=16, mamba_size=4, device="cpu"))
        session.run("insert", {"key": [1, 2, 3, 4, 5, 6]})
        session.run("insert", {"key": [20, 21, 22, 23, 24, 25, 26, 27]})
        return session

    session = start()
    log = EventLog(session.cache.events)
    with faulty_allocators(session.cache) as calls:
        session.run("req_prefill", {"req": "x", "tokens": tokens})
    assert calls == allocs  # (with Mamba: the copy-on-write slot during the match) then KV, after evicting
    assert any(e.cause is Cause.CAPACITY for e in log.take())
    for k in range(len(allocs)):
        session = start()
        cache = session.cache
        before = cache.snapshot()
        with faulty_allocators(cache, fail_at=k):
            with pytest.raises(PoolExhaustedError, match="injected"):
                session.run("req_prefill", {"req": "x", "tokens": tokens})
        after = cache.snapshot()
        assert check_invariants(cache) == []
        assert after.requests == () and session.reqs == {}
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


# ---- part (b): real refusals, through the runner --------------------------------


def run_checked(tmp_path, text: str):
    """Run a scenario step by step; every step that expects an error must leave the
    whole state (deep_state) exactly as it was, and every step must pass."""
    path = tmp_path / "s.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    runner = Runner(load_scenario(path))
    refused = 0
    while not runner.done:
        before = deep_state(runner.cache, runner.session)
        record = runner.step()
        if record.step.expect_error is not None:
            assert record.error is not None, f"step {record.index} was not refused"
            assert_same(before, deep_state(runner.cache, runner.session))
            refused += 1
        assert record.passed, (
            record.index, record.error, [str(f) for f in record.failures], [str(v) for v in record.violations]
        )
    assert refused
    return runner.timeline


def test_insert_refused_for_a_mamba_state_returns_its_full_slots(tmp_path):
    """The differential run's find: the Mamba state was allocated after the Full
    slots, and its refusal never gave them back (pool.full.balance on every step)."""
    run_checked(tmp_path, """\
        schema = 1
        [scenario]
        name = "insert-refused-by-mamba"
        [config]
        components = ["full", "mamba"]
        kv_size = 32
        mamba_size = 1
        [[step]]
        op = "req_prefill"
        req = "r"
        tokens = [7, 8, 9]
        [[step]]
        op = "insert"
        key = [2, 3]
        expect_error = "mamba pool exhausted"
        [[step]]
        op = "check"
        expect = { full_available = 29, full_held = 3, mamba_held = 1, nodes = 0 }
        [[step]]
        op = "req_finish"
        req = "r"
        expect = { full_evictable = 3, mamba_evictable = 1, mamba_available = 0 }
        [[step]]
        op = "insert"
        key = [2, 3]
        description = "now the cached state of [7 8 9] can be evicted for it"
        expect = { nodes = 1, full_evictable = 2, full_available = 30, mamba_evictable = 1 }
        [[step]]
        op = "evict"
        full = 100
        expect = { full_available = 32, mamba_available = 1 }
        """)


def test_insert_refused_for_a_mamba_state_evicts_nothing_for_its_full_slots(tmp_path):
    """Full has to evict to fit the key and could; Mamba cannot give a state. Refused
    before the Full eviction (before the fix: evicted, allocated, then refused)."""
    run_checked(tmp_path, """\
        schema = 1
        [scenario]
        name = "insert-refused-by-mamba-after-full-could-evict"
        [config]
        components = ["full", "mamba"]
        kv_size = 8
        mamba_size = 1
        [[step]]
        op = "insert"
        key = [1, 2, 3, 4, 5, 6, 7, 8]
        [[step]]
        op = "match"
        key = [1, 2, 3, 4, 99]
        description = "splits [1..8]: the upper half [1..4] has no state"
        [[step]]
        op = "evict"
        mamba = 1
        description = "the state's leaf [5..8] goes whole: [1..4] is a stateless Full leaf"
        expect = { nodes = 1, full_evictable = 4, mamba_evictable = 0, mamba_available = 1 }
        [[step]]
        op = "req_prefill"
        req = "r"
        tokens = [30]
        expect = { full_available = 3, mamba_available = 0, mamba_held = 1 }
        [[step]]
        op = "insert"
        key = [40, 41, 42, 43, 44]
        expect_error = "mamba pool exhausted"
        [[step]]
        op = "check"
        expect = { nodes = 1, full_evictable = 4, full_available = 3 }
        [[step]]
        op = "req_finish"
        req = "r"
        [[step]]
        op = "insert"
        key = [40, 41, 42, 43, 44]
        description = "evicts [1..4] for Full and [30]'s state (its leaf) for the state"
        expect = { nodes = 1, full_available = 3, mamba_available = 0, mamba_evictable = 1 }
        [[step]]
        op = "evict"
        full = 100
        expect = { nodes = 0, full_available = 8, mamba_available = 1 }
        """)


FULL_P1 = """\
    schema = 1
    [scenario]
    name = "full-refusals"
    [config]
    components = ["full"]
    kv_size = 16
    [[step]]
    op = "insert"
    key = [1, 2, 3, 4, 5, 6]
    [[step]]
    op = "req_prefill"
    req = "r"
    tokens = [20, 21, 22, 23, 24, 25, 26, 27]
    expect = { full_available = 2, full_evictable = 6, full_held = 8 }
    [[step]]
    op = "insert"
    key = [40, 41, 42, 43, 44, 45, 46, 47, 48]
    expect_error = "full pool exhausted"
    [[step]]
    op = "req_prefill"
    req = "q"
    tokens = [50, 51, 52, 53, 54, 55, 56, 57, 58]
    expect_error = "full pool exhausted"
    [[step]]
    op = "req_decode"
    req = "r"
    tokens = [60, 61, 62, 63, 64, 65, 66, 67, 68]
    expect_error = "full pool exhausted"
    [[step]]
    op = "check"
    expect = { nodes = 1, full_available = 2, full_evictable = 6, requests = 1 }
    [[step]]
    op = "req_decode"
    req = "r"
    tokens = [60, 61, 62]
    description = "fits once [1..6] is evicted"
    expect = { nodes = 0, full_available = 5, full_held = 11 }
    [[step]]
    op = "req_finish"
    req = "r"
    [[step]]
    op = "evict"
    full = 100
    expect = { full_available = 16 }
    """

FULL_P4_DECODE = """\
    schema = 1
    [scenario]
    name = "full-decode-refused-at-a-page-edge"
    [config]
    components = ["full"]
    page_size = 4
    kv_size = 16
    [[step]]
    op = "req_prefill"
    req = "r"
    tokens = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
    expect = { full_available = 0, full_held = 16 }
    [[step]]
    op = "req_decode"
    req = "r"
    tokens = [15, 16, 17]
    description = "two fit the last page, the third needs a page: refused whole"
    expect_error = "full pool exhausted"
    [[step]]
    op = "req_decode"
    req = "r"
    tokens = [15, 16]
    [[step]]
    op = "req_prefill"
    req = "q"
    tokens = [40]
    expect_error = "full pool exhausted"
    [[step]]
    op = "insert"
    key = [40]
    expect_error = "full pool exhausted"
    [[step]]
    op = "req_finish"
    req = "r"
    expect = { nodes = 2, full_evictable = 16 }
    [[step]]
    op = "evict"
    full = 100
    expect = { full_available = 16 }
    """

SWA_P1 = """\
    schema = 1
    [scenario]
    name = "swa-refusals"
    [config]
    components = ["full", "swa"]
    sliding_window = 4
    kv_size = 64
    swa_kv_size = 8
    [[step]]
    op = "insert"
    key = [50, 51]
    [[step]]
    op = "req_prefill"
    req = "r"
    tokens = [1, 2, 3, 4, 5, 6]
    expect = { swa_available = 0, swa_evictable = 2, swa_held = 6 }
    [[step]]
    op = "insert"
    key = [20, 21, 22]
    expect_error = "swa pool exhausted"
    [[step]]
    op = "insert"
    key = [20, 21, 22, 23, 24, 25]
    swa_evicted_seqlen = 4
    expect_error = "swa pool exhausted"
    [[step]]
    op = "req_prefill"
    req = "q"
    tokens = [30, 31, 32]
    expect_error = "swa pool exhausted"
    [[step]]
    op = "req_decode"
    req = "r"
    tokens = [7, 8, 9]
    expect_error = "swa pool exhausted"
    [[step]]
    op = "req_decode"
    req = "r"
    tokens = [7, 8, 9]
    slide_window = true
    expect_error = "swa pool exhausted"
    [[step]]
    op = "check"
    expect = { nodes = 1, swa_evictable = 2, swa_available = 0, full_held = 6 }
    [[step]]
    op = "req_decode"
    req = "r"
    tokens = [7, 8]
    slide_window = true
    description = "evicts [50 51] for its two slots, then frees what slid out of the window"
    expect = { nodes = 0, full_held = 8 }
    [[step]]
    op = "req_finish"
    req = "r"
    [[step]]
    op = "insert"
    key = [20, 21, 22]
    [[step]]
    op = "evict"
    full = 100
    expect = { nodes = 0, full_available = 64, swa_available = 8 }
    """

SWA_P4_DECODE = """\
    schema = 1
    [scenario]
    name = "swa-decode-refused-at-a-page-edge"
    [config]
    components = ["full", "swa"]
    sliding_window = 4
    page_size = 4
    kv_size = 64
    swa_kv_size = 8
    [[step]]
    op = "req_prefill"
    req = "r"
    tokens = [1, 2, 3, 4, 5, 6]
    expect = { swa_available = 0, swa_held = 8 }
    [[step]]
    op = "req_decode"
    req = "r"
    tokens = [7, 8, 9]
    description = "two fill the last page (its SWA page is the request's), the third needs an SWA page"
    expect_error = "swa pool exhausted"
    [[step]]
    op = "req_decode"
    req = "r"
    tokens = [7, 8]
    [[step]]
    op = "req_finish"
    req = "r"
    [[step]]
    op = "evict"
    full = 100
    expect = { nodes = 0, full_available = 64, swa_available = 8 }
    """

MAMBA_P1 = """\
    schema = 1
    [scenario]
    name = "mamba-refusals"
    [config]
    components = ["full", "mamba"]
    kv_size = 64
    mamba_size = 2
    [[step]]
    op = "req_prefill"
    req = "r"
    tokens = [1, 2, 3, 4]
    [[step]]
    op = "req_chunk"
    req = "r"
    description = "the tree gets a copy of r's state (locked by r)"
    expect = { mamba_available = 0, mamba_protected = 1, mamba_held = 1 }
    [[step]]
    op = "req_chunk"
    req = "r"
    expect_error = "cannot alloc mamba"
    [[step]]
    op = "req_prefill"
    req = "q"
    tokens = [1, 2, 3, 4, 9]
    description = "shares r's cached prefix, but its copy of the state has no slot"
    expect_error = "mamba pool exhausted"
    [[step]]
    op = "insert"
    key = [10, 11, 12]
    expect_error = "mamba pool exhausted"
    [[step]]
    op = "req_decode"
    req = "r"
    tokens = [5, 6]
    description = "decode takes no state slot"
    [[step]]
    op = "req_finish"
    req = "r"
    expect = { mamba_available = 0, mamba_evictable = 2, requests = 0 }
    [[step]]
    op = "req_prefill"
    req = "q"
    tokens = [1, 2, 3, 4, 9]
    expect = { prefix_len = 4 }
    [[step]]
    op = "req_finish"
    req = "q"
    [[step]]
    op = "evict"
    full = 100
    expect = { nodes = 0, full_available = 64, mamba_available = 2 }
    """

MAMBA_P4 = """\
    schema = 1
    [scenario]
    name = "mamba-ping-pong-refusals"
    [config]
    components = ["full", "mamba"]
    page_size = 4
    kv_size = 256
    mamba_size = 4
    [[step]]
    op = "req_prefill"
    req = "r"
    tokens = [%s]
    description = "70 tokens: a tracked checkpoint at 64; three state slots"
    expect = { mamba_held = 3, mamba_available = 1 }
    [[step]]
    op = "req_prefill"
    req = "q"
    tokens = [1, 2, 3, 4]
    description = "needs three slots, one is free"
    expect_error = "mamba pool exhausted"
    [[step]]
    op = "insert"
    key = [300, 301, 302, 303]
    [[step]]
    op = "check"
    expect = { mamba_available = 0, mamba_evictable = 1 }
    [[step]]
    op = "req_prefill"
    req = "q"
    tokens = [1, 2, 3, 4]
    description = "one slot could be evicted; still two short"
    expect_error = "mamba pool exhausted"
    [[step]]
    op = "req_chunk"
    req = "r"
    description = "donates its checkpoint, and evicts [300..303]'s state for the replacement slot"
    expect = { nodes = 1, mamba_available = 0, mamba_protected = 1, mamba_held = 3 }
    [[step]]
    op = "req_chunk"
    req = "r"
    description = "no new checkpoint since: nothing to donate"
    [[step]]
    op = "req_decode"
    req = "r"
    tokens = [%s]
    description = "a checkpoint at 128 now"
    [[step]]
    op = "req_chunk"
    req = "r"
    expect_error = "cannot alloc mamba"
    [[step]]
    op = "req_finish"
    req = "r"
    [[step]]
    op = "evict"
    full = 1000
    expect = { nodes = 0, full_available = 256, mamba_available = 4 }
    """ % (", ".join(map(str, range(1000, 1070))), ", ".join(map(str, range(2000, 2060))))

SWA_MAMBA_P1 = """\
    schema = 1
    [scenario]
    name = "swa-mamba-refusals"
    [config]
    components = ["full", "swa", "mamba"]
    sliding_window = 4
    kv_size = 64
    swa_kv_size = 16
    mamba_size = 1
    [[step]]
    op = "req_prefill"
    req = "r"
    tokens = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    expect = { swa_available = 4, mamba_available = 0 }
    [[step]]
    op = "insert"
    key = [20, 21]
    description = "SWA has room, the state has none"
    expect_error = "mamba pool exhausted"
    [[step]]
    op = "insert"
    key = [20, 21, 22, 23, 24]
    description = "neither has room"
    expect_error = "pool exhausted"
    [[step]]
    op = "req_decode"
    req = "r"
    tokens = [13, 14, 15, 16, 17]
    expect_error = "swa pool exhausted"
    [[step]]
    op = "req_decode"
    req = "r"
    tokens = [13, 14, 15, 16]
    slide_window = true
    [[step]]
    op = "req_finish"
    req = "r"
    [[step]]
    op = "insert"
    key = [20, 21]
    [[step]]
    op = "evict"
    full = 100
    expect = { nodes = 0, full_available = 64, swa_available = 16, mamba_available = 1 }
    """

AUTO_EVICT_OFF = """\
    schema = 1
    [scenario]
    name = "refusals-without-auto-evict"
    [config]
    components = ["full", "swa", "mamba"]
    sliding_window = 4
    kv_size = 16
    swa_kv_size = 16
    mamba_size = 2
    auto_evict = false
    [[step]]
    op = "insert"
    key = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    [[step]]
    op = "req_prefill"
    req = "r"
    tokens = [20, 21, 22, 23]
    expect = { full_available = 2, mamba_available = 0 }
    [[step]]
    op = "insert"
    key = [30]
    description = "Full has room, the state would need an eviction"
    expect_error = "auto_evict is off"
    [[step]]
    op = "insert"
    key = [30, 31, 32]
    expect_error = "auto_evict is off"
    [[step]]
    op = "req_decode"
    req = "r"
    tokens = [24, 25, 26]
    expect_error = "auto_evict is off"
    [[step]]
    op = "req_decode"
    req = "r"
    tokens = [24, 25]
    [[step]]
    op = "req_finish"
    req = "r"
    [[step]]
    op = "evict"
    full = 100
    expect = { nodes = 0, full_available = 16, swa_available = 16, mamba_available = 2 }
    """


@pytest.mark.parametrize(
    "text",
    [FULL_P1, FULL_P4_DECODE, SWA_P1, SWA_P4_DECODE, MAMBA_P1, MAMBA_P4, SWA_MAMBA_P1, AUTO_EVICT_OFF],
    ids=["full-p1", "full-p4-decode", "swa-p1", "swa-p4-decode", "mamba-p1", "mamba-p4", "swa-mamba-p1",
         "auto-evict-off"],
)
def test_real_refusals_change_nothing_and_the_scenario_carries_on(tmp_path, text):
    run_checked(tmp_path, text)


def test_a_bad_window_floor_is_refused_before_any_slot_is_taken(tmp_path):
    """An unaligned floor used to free the SWA of a part page (so the whole SWA page)
    before the insert refused it; giving the slots back then hit a double free."""
    run_checked(tmp_path, """\
        schema = 1
        [scenario]
        name = "bad-floor"
        [config]
        components = ["full", "swa"]
        sliding_window = 4
        page_size = 4
        kv_size = 32
        [[step]]
        op = "insert"
        key = [1, 2, 3, 4, 5, 6, 7, 8]
        swa_evicted_seqlen = 3
        expect_error = "multiple of page_size"
        [[step]]
        op = "insert"
        key = [1, 2, 3, 4, 5, 6, 7, 8]
        swa_evicted_seqlen = 4
        expect = { nodes = 2, swa_tombstones = 1 }
        [[step]]
        op = "evict"
        full = 100
        expect = { full_available = 32, swa_available = 32 }
        """)
