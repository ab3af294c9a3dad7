"""Real refusals: every pool (Full, SWA, Mamba) too small for every op that allocates
from it, driven through the runner. Each refused step must leave the whole state
exactly as it was, and the scenario must carry on cleanly afterwards.
"""

from __future__ import annotations

import pytest
from refused_util import assert_same, deep_state

from workbench.model import ops
from workbench.model.timeline.runner import Runner
from workbench.model.scenarios.scenario import scenario_from_records

# ---- part (b): real refusals, through the runner --------------------------------


def scenario(name: str, config: dict, *steps: dict):
    """A scenario as records, one line a step: the steps are what differs between these
    tests, and a [[step]] table a field a line made every scenario repeat the others."""
    return scenario_from_records({"schema": 1, "scenario": {"name": name}, "config": config}, list(steps), name)


def step(op: str, **fields) -> dict:
    """One step record (``op`` first, as a scenario file writes it)."""
    return {"op": op, **fields}


def run_checked(scenario):
    """Run a scenario step by step; every step that expects an error must leave the
    whole state (deep_state) exactly as it was, and every step must pass."""
    runner = Runner(scenario)
    refused = 0
    while not runner.done:
        before = deep_state(runner.cache, runner.driver)
        record = runner.step()
        if record.step.expect_error is not None:
            assert record.error is not None, f"step {record.index} was not refused"
            after = deep_state(runner.cache, runner.driver)
            if ops.get(record.step.op).refusal_changes and ("exhausted" in record.error or
                                                             "cannot alloc mamba cache" in record.error):
                # a refused admission keeps what its match did, as SGLang's scheduler: a split, an
                # LRU refresh (a match whose state copy finds no slot asserts there); it holds
                # nothing, so every pool and request is as it was
                tree_before, tree_after = before.pop("snapshot"), after.pop("snapshot")
                assert (tree_after.pools, tree_after.requests) == (tree_before.pools, tree_before.requests)
            assert_same(before, after)
            refused += 1
        assert record.passed, (
            record.index, record.error, [str(f) for f in record.failures], [str(v) for v in record.violations]
        )
    assert refused
    return runner.timeline


def test_insert_refused_for_a_mamba_state_returns_its_full_slots():
    """The differential run's find: the Mamba state was allocated after the Full
    slots, and its refusal never gave them back (pool.full.balance on every step)."""
    run_checked(scenario(
        "insert-refused-by-mamba", dict(components=["full", "mamba"], kv_size=32, mamba_size=1),
        step("req_prefill", req="r", tokens=[7, 8, 9]),
        step("insert", key=[2, 3], expect_error="mamba pool exhausted"),
        step("check", expect=dict(full_available=29, full_held=3, mamba_held=1, nodes=0)),
        step("req_finish", req="r", expect=dict(full_evictable=3, mamba_evictable=1, mamba_available=0)),
        step("insert", key=[2, 3], description="now the cached state of [7 8 9] can be evicted for it",
             expect=dict(nodes=1, full_evictable=2, full_available=30, mamba_evictable=1)),
        step("evict", full=100, expect=dict(full_available=32, mamba_available=1)),
    ))


def test_insert_refused_for_a_mamba_state_evicts_nothing_for_its_full_slots():
    """Full has to evict to fit the key and could; Mamba cannot give a state. Refused
    before the Full eviction (before the fix: evicted, allocated, then refused)."""
    run_checked(scenario(
        "insert-refused-by-mamba-after-full-could-evict", dict(components=["full", "mamba"], kv_size=8, mamba_size=1),
        step("insert", key=[1, 2, 3, 4, 5, 6, 7, 8]),
        step("match", key=[1, 2, 3, 4, 99], description="splits [1..8]: the upper half [1..4] has no state"),
        step("evict", mamba=1, description="the state's leaf [5..8] goes whole: [1..4] is a stateless Full leaf",
             expect=dict(nodes=1, full_evictable=4, mamba_evictable=0, mamba_available=1)),
        step("req_prefill", req="r", tokens=[30], expect=dict(full_available=3, mamba_available=0, mamba_held=1)),
        step("insert", key=[40, 41, 42, 43, 44], expect_error="mamba pool exhausted"),
        step("check", expect=dict(nodes=1, full_evictable=4, full_available=3)),
        step("req_finish", req="r"),
        step("insert", key=[40, 41, 42, 43, 44],
             expect=dict(nodes=1, full_available=3, mamba_available=0, mamba_evictable=1),
             description="evicts [1..4] for Full and [30]'s state (its leaf) for the state"),
        step("evict", full=100, expect=dict(nodes=0, full_available=8, mamba_available=1)),
    ))


FULL_P1 = scenario(
    "full-refusals", dict(components=["full"], kv_size=16),
    step("insert", key=[1, 2, 3, 4, 5, 6]),
    step("req_prefill", req="r", tokens=[20, 21, 22, 23, 24, 25, 26, 27],
         expect=dict(full_available=2, full_evictable=6, full_held=8)),
    step("insert", key=[40, 41, 42, 43, 44, 45, 46, 47, 48], expect_error="full pool exhausted"),
    step("req_prefill", req="q", tokens=[50, 51, 52, 53, 54, 55, 56, 57, 58], expect_error="full pool exhausted"),
    step("req_decode", req="r", tokens=[60, 61, 62, 63, 64, 65, 66, 67, 68], expect_error="full pool exhausted"),
    step("check", expect=dict(nodes=1, full_available=2, full_evictable=6, requests=1)),
    step("req_decode", req="r", tokens=[60, 61, 62], description="fits once [1..6] is evicted",
         expect=dict(nodes=0, full_available=5, full_held=11)),
    step("req_finish", req="r"),
    step("evict", full=100, expect=dict(full_available=16)),
)

FULL_P4_DECODE = scenario(
    "full-decode-refused-at-a-page-edge", dict(components=["full"], page_size=4, kv_size=16),
    step("req_prefill", req="r", tokens=list(range(1, 15)), expect=dict(full_available=0, full_held=16)),
    step("req_decode", req="r", tokens=[15, 16, 17], expect_error="full pool exhausted",
         description="two fit the last page, the third needs a page: refused whole"),
    step("req_decode", req="r", tokens=[15, 16]),
    step("req_prefill", req="q", tokens=[40], expect_error="full pool exhausted"),
    step("insert", key=[40], expect_error="full pool exhausted"),
    step("req_finish", req="r", expect=dict(nodes=2, full_evictable=16)),
    step("evict", full=100, expect=dict(full_available=16)),
)

SWA_P1 = scenario(
    "swa-refusals", dict(components=["full", "swa"], sliding_window=4, kv_size=64, swa_kv_size=8),
    step("insert", key=[50, 51]),
    step("req_prefill", req="r", tokens=[1, 2, 3, 4, 5, 6], expect=dict(swa_available=0, swa_evictable=2, swa_held=6)),
    step("insert", key=[20, 21, 22], expect_error="swa pool exhausted"),
    step("insert", key=[20, 21, 22, 23, 24, 25], swa_evicted_seqlen=4, expect_error="swa pool exhausted"),
    step("req_prefill", req="q", tokens=[30, 31, 32], expect_error="swa pool exhausted"),
    step("req_decode", req="r", tokens=[7, 8, 9], expect_error="swa pool exhausted"),
    step("req_decode", req="r", tokens=[7, 8, 9], slide_window=True, expect_error="swa pool exhausted"),
    step("check", expect=dict(nodes=1, swa_evictable=2, swa_available=0, full_held=6)),
    step("req_decode", req="r", tokens=[7, 8], slide_window=True, expect=dict(nodes=0, full_held=8),
         description="evicts [50 51] for its two slots, then frees what slid out of the window"),
    step("req_finish", req="r"),
    step("insert", key=[20, 21, 22]),
    step("evict", full=100, expect=dict(nodes=0, full_available=64, swa_available=8)),
)

SWA_P4_DECODE = scenario(
    "swa-decode-refused-at-a-page-edge",
    dict(components=["full", "swa"], sliding_window=4, page_size=4, kv_size=64, swa_kv_size=8),
    step("req_prefill", req="r", tokens=[1, 2, 3, 4, 5, 6], expect=dict(swa_available=0, swa_held=8)),
    step("req_decode", req="r", tokens=[7, 8, 9], expect_error="swa pool exhausted",
         description="two fill the last page (its SWA page is the request's), the third needs an SWA page"),
    step("req_decode", req="r", tokens=[7, 8]),
    step("req_finish", req="r"),
    step("evict", full=100, expect=dict(nodes=0, full_available=64, swa_available=8)),
)

MAMBA_P1 = scenario(
    "mamba-refusals", dict(components=["full", "mamba"], kv_size=64, mamba_size=2),
    step("req_prefill", req="r", tokens=[1, 2, 3, 4]),
    step("req_chunk", req="r", description="the tree gets a copy of r's state (locked by r)",
         expect=dict(mamba_available=0, mamba_protected=1, mamba_held=1)),
    step("req_chunk", req="r", expect_error="cannot alloc mamba"),
    step("req_prefill", req="q", tokens=[1, 2, 3, 4, 9], expect_error="SGLang asserts here: cannot alloc mamba cache",
         description="shares r's cached prefix, but its match's copy of the state has no slot"),
    step("insert", key=[10, 11, 12], expect_error="mamba pool exhausted"),
    step("req_decode", req="r", tokens=[5, 6], description="decode takes no state slot"),
    step("req_finish", req="r", expect=dict(mamba_available=0, mamba_evictable=2, requests=0)),
    step("req_prefill", req="q", tokens=[1, 2, 3, 4, 9], expect=dict(prefix_len=4)),
    step("req_finish", req="q"),
    step("evict", full=100, expect=dict(nodes=0, full_available=64, mamba_available=2)),
)

MAMBA_P4 = scenario(
    "mamba-ping-pong-refusals", dict(components=["full", "mamba"], page_size=4, kv_size=256, mamba_size=4),
    step("req_prefill", req="r", tokens=list(range(1000, 1070)), expect=dict(mamba_held=3, mamba_available=1),
         description="70 tokens: a tracked checkpoint at 64; three state slots"),
    step("req_prefill", req="q", tokens=[1, 2, 3, 4], description="needs three slots, one is free",
         expect_error="mamba pool exhausted"),
    step("insert", key=[300, 301, 302, 303]),
    step("check", expect=dict(mamba_available=0, mamba_evictable=1)),
    step("req_prefill", req="q", tokens=[1, 2, 3, 4], description="one slot could be evicted; still two short",
         expect_error="mamba pool exhausted"),
    step("req_chunk", req="r", expect=dict(nodes=1, mamba_available=0, mamba_protected=1, mamba_held=3),
         description="donates its checkpoint, and evicts [300..303]'s state for the replacement slot"),
    step("req_chunk", req="r", description="no new checkpoint since: nothing to donate"),
    step("req_decode", req="r", tokens=list(range(2000, 2060)), description="a checkpoint at 128 now"),
    step("req_chunk", req="r", expect_error="cannot alloc mamba"),
    step("req_finish", req="r"),
    step("evict", full=1000, expect=dict(nodes=0, full_available=256, mamba_available=4)),
)

SWA_MAMBA_P1 = scenario(
    "swa-mamba-refusals",
    dict(components=["full", "swa", "mamba"], sliding_window=4, kv_size=64, swa_kv_size=16, mamba_size=1),
    step("req_prefill", req="r", tokens=list(range(1, 13)), expect=dict(swa_available=4, mamba_available=0)),
    step("insert", key=[20, 21], description="SWA has room, the state has none", expect_error="mamba pool exhausted"),
    step("insert", key=[20, 21, 22, 23, 24], description="neither has room", expect_error="pool exhausted"),
    step("req_decode", req="r", tokens=[13, 14, 15, 16, 17], expect_error="swa pool exhausted"),
    step("req_decode", req="r", tokens=[13, 14, 15, 16], slide_window=True),
    step("req_finish", req="r"),
    step("insert", key=[20, 21]),
    step("evict", full=100, expect=dict(nodes=0, full_available=64, swa_available=16, mamba_available=1)),
)

AUTO_EVICT_OFF = scenario(
    "refusals-without-auto-evict",
    dict(components=["full", "swa", "mamba"], sliding_window=4, kv_size=16, swa_kv_size=16, mamba_size=2,
         auto_evict=False),
    step("insert", key=[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]),
    step("req_prefill", req="r", tokens=[20, 21, 22, 23], expect=dict(full_available=2, mamba_available=0)),
    step("insert", key=[30], description="Full has room, the state would need an eviction",
         expect_error="auto_evict is off"),
    step("insert", key=[30, 31, 32], expect_error="auto_evict is off"),
    step("req_decode", req="r", tokens=[24, 25, 26], expect_error="auto_evict is off"),
    step("req_decode", req="r", tokens=[24, 25]),
    step("req_finish", req="r"),
    step("evict", full=100, expect=dict(nodes=0, full_available=16, swa_available=16, mamba_available=2)),
)


@pytest.mark.parametrize(
    "refusals",
    [FULL_P1, FULL_P4_DECODE, SWA_P1, SWA_P4_DECODE, MAMBA_P1, MAMBA_P4, SWA_MAMBA_P1, AUTO_EVICT_OFF],
    ids=["full-p1", "full-p4-decode", "swa-p1", "swa-p4-decode", "mamba-p1", "mamba-p4", "swa-mamba-p1",
         "auto-evict-off"],
)
def test_real_refusals_change_nothing_and_the_scenario_carries_on(refusals):
    run_checked(refusals)


def test_a_bad_window_floor_is_refused_before_any_slot_is_taken():
    """An unaligned floor used to free the SWA of a part page (so the whole SWA page)
    before the insert refused it; giving the slots back then hit a double free."""
    run_checked(scenario(
        "bad-floor", dict(components=["full", "swa"], sliding_window=4, page_size=4, kv_size=32),
        step("insert", key=[1, 2, 3, 4, 5, 6, 7, 8], swa_evicted_seqlen=3, expect_error="multiple of page_size"),
        step("insert", key=[1, 2, 3, 4, 5, 6, 7, 8], swa_evicted_seqlen=4, expect=dict(nodes=2, swa_tombstones=1)),
        step("evict", full=100, expect=dict(full_available=32, swa_available=32)),
    ))
