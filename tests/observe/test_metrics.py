"""The cache's running totals (cache/observe/metrics.py): hits and misses by tier, per component
evictions and the traffic between tiers, read through the snapshot, expectable in a
scenario and reported by ``urc run --json``. Each count is checked against what the
calls did, worked out by hand in the test."""

from __future__ import annotations

import json

from cache import EvictParams, InsertParams, RadixKey, UnifiedRadixCache
from cache.observe.metrics import metric_fields

from urc_util import full_header, urc

A = list(range(1, 17))


def totals(cache) -> dict[str, int]:
    """The snapshot's metrics that are not 0."""
    return {k: v for k, v in cache.snapshot().metrics.items() if v}


def insert(cache, tokens):
    slots = cache.alloc_kv(len(tokens))
    cache.write_kv(slots, tokens)
    cache.insert(InsertParams(RadixKey(tokens), slots))


def test_a_device_tier_counts_hits_misses_and_evictions():
    cache = UnifiedRadixCache(kv_size=32, page_size=4, device="cpu")
    assert totals(cache) == {} and list(cache.snapshot().metrics) == list(metric_fields(["full"]))  # in display order
    insert(cache, A)
    cache.match_prefix(RadixKey(A[:10]))  # 8 on the device (page 4), 2 missed
    cache.match_prefix(RadixKey([99, 98]))
    assert totals(cache) == {"matches": 2, "device_hit_tokens": 8, "miss_tokens": 4}
    cache.evict(EvictParams(num_tokens=4))  # the match split A at 8: the leaf's 8 tokens go
    assert totals(cache)["full_evicted_total"] == 8
    cache.reset()
    assert totals(cache) == {}


def test_the_host_tier_counts_backups_loads_and_host_evictions():
    cache = UnifiedRadixCache(kv_size=32, page_size=4, device="cpu", hicache={"write_policy": "write_through"})
    insert(cache, A)  # write-through: backed up at once
    cache.evict(EvictParams(num_tokens=16))  # demoted: the device copy goes, the host copy stays
    cache.match_prefix(RadixKey(A + [50]))
    assert totals(cache) == {"full_backed_up_total": 16, "full_evicted_total": 16, "matches": 1, "host_hit_tokens": 16,
                             "miss_tokens": 1}
    assert cache.load_back(RadixKey(A)).loaded == 16  # its match counts 16 host-hit tokens more
    assert totals(cache)["full_loaded_total"] == 16 and totals(cache)["host_hit_tokens"] == 32
    cache.evict(EvictParams(num_tokens=16))
    cache.evict_host(16)
    assert totals(cache)["full_host_evicted_total"] == 16 and totals(cache)["full_evicted_total"] == 32


def test_swa_evictions_count_apart_from_full():
    cache = UnifiedRadixCache(components=["full", "swa"], kv_size=64, swa_kv_size=64, sliding_window=4,
                              page_size=4, device="cpu")
    insert(cache, A)
    before = cache.snapshot().pools["swa"].available
    result = cache.evict(EvictParams(num_tokens=0, swa_num_tokens=4))  # tombstones SWA only
    freed = cache.snapshot().pools["swa"].available - before
    assert freed > 0 and totals(cache) == {"swa_evicted_total": freed} == {"swa_evicted_total": result.swa_num_tokens_evicted}


# a format string: its braces are doubled
SCENARIO = full_header("metrics", kv_size=32, page_size=4, hicache='{{ write_policy = "write_through" }}') + """\
[[step]]
op = "insert"
key = [1, 2, 3, 4, 5, 6, 7, 8]
expect = {{ full_backed_up_total = 8 }}
[[step]]
op = "evict"
full = 8
expect = {{ full_evicted_total = {evicted} }}
[[step]]
op = "match"
key = [1, 2, 3, 4, 5, 6, 7, 8, 9]
expect = {{ host_hit_tokens = 8, miss_tokens = 1, device_hit_tokens = 0 }}
"""


def test_a_scenario_expects_metrics_and_json_reports_them(tmp_path, capsys):
    good = tmp_path / "good.toml"
    good.write_text(SCENARIO.format(evicted=8))
    rc, out, _ = urc(capsys, "run", "--json", str(good))
    assert rc == 0
    (report,) = json.loads(out)
    assert report["passed"] and report["final_state"]["metrics"]["host_hit_tokens"] == 8
    wrong = tmp_path / "wrong.toml"
    wrong.write_text(SCENARIO.format(evicted=9))
    rc, out, _ = urc(capsys, "run", str(wrong))
    assert rc == 1 and "full_evicted_total: expected 9, got 8" in out
    bad = tmp_path / "bad.toml"
    bad.write_text(SCENARIO.format(evicted='"eight"'))
    rc, _, err = urc(capsys, "run", str(bad))
    assert rc == 2 and "bad.toml:16" in err and "expected value must be an int" in err
