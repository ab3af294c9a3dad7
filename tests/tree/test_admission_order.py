"""An admission that must evict takes the request's own slots (Mamba's states) before
its KV, as v0.5.23's alloc_for_extend does (alloc_req_slots -> ensure_mamba_capacity,
then alloc_token_slots): the state eviction may delete a leaf whole, and the KV
eviction after it then needs less. Expected numbers are SGLang 0.5.23's answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from mamba_util import MambaChecked
from workbench.model.timeline.runner import run_scenario

REPROS = Path(__file__).resolve().parents[1] / "repros"


def test_state_eviction_runs_before_the_kv_eviction():
    mc = MambaChecked(1, sliding_window=2, kv_size=64, mamba_size=2, swa_kv_size=16)
    mc.insert(list(range(1, 9)))  # its state sits on the leaf [7 8]
    mc.insert(list(range(9, 15)))
    assert mc.avail() == {"full": 50, "swa": 2, "mamba": 0}
    mc.new_request([20, 21, 22, 23])  # 4 SWA slots short of 2, one state short
    # the oldest state's leaf went whole (2 SWA back): no SWA eviction was needed
    assert mc.avail() == {"full": 48, "swa": 0, "mamba": 0}
    assert mc.cache.evictable_size("swa") == 12
    cached = [n for n in mc.cache.snapshot().nodes if n.key]
    assert sorted(n.path for n in cached) == [(1, 2, 3, 4, 5, 6), (9, 10, 11, 12), tuple(range(9, 15))]
    # the shared prefix [1..6] keeps its SWA (KV first had tombstoned it)
    assert all(n.components["swa"].value_len == n.components["full"].value_len for n in cached)
    assert mc.match(list(range(1, 9))).prefix_len == 0  # A's state is gone with its leaf


@pytest.mark.parametrize("name, step, pool, sglang", [
    ("swa-mamba-admission-swa-available-w1.jsonl", 10, "swa", 0),
    ("swa-mamba-admission-full-available-w1.jsonl", 12, "full", 145),
    ("swa-mamba-admission-swa-available-w64.jsonl", 9, "swa", 52),
])
def test_shrunk_random_runs_match_sglang(name, step, pool, sglang):
    timeline = run_scenario(REPROS / name)
    assert timeline.passed
    assert timeline.records[step - 1].state.pools[pool].available == sglang
