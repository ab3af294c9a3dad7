"""Real refusals: every pool (Full, SWA, Mamba) too small for every op that allocates
from it, driven through the runner. Each refused step must leave the whole state
exactly as it was, and the scenario must carry on cleanly afterwards.
"""

from __future__ import annotations

import textwrap

import pytest
from refused_util import assert_same, deep_state

from workbench.model import ops
from workbench.model.timeline.runner import Runner
from workbench.model.scenarios.scenario import load_scenario

# ---- part (b): real refusals, through the runner --------------------------------


def run_checked(tmp_path, text: str):
    """Run a scenario step by step; every step that expects an error must leave the
    whole state (deep_state) exactly as it was, and every step must pass."""
    path = tmp_path / "s.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    runner = Runner(load_scenario(path))
    refused = 0
    while not runner.done:
        before = deep_state(runner.cache, runner.driver)
        record = runner.step()
        if record.step.expect_error is not None:
            assert record.error is not None, f"step {record.index} was not refused"
            after = deep_state(runner.cache, runner.driver)
            if ops.get(record.step.op).refusal_changes and "exhausted" in record.error:
                # a refused admission keeps what its match did, as SGLang's scheduler: a split, an
                # LRU refresh; it holds nothing, so every pool and request is as it was
                tree_before, tree_after = before.pop("snapshot"), after.pop("snapshot")
                assert (tree_after.pools, tree_after.requests) == (tree_before.pools, tree_before.requests)
            assert_same(before, after)
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
