"""Retract, restore and abort of a request (cache/requests/retraction.py), as SGLang
0.5.23 runs them: the pools after each, the host backup's data, the refusals (nothing
changes) and the ops' names in a scenario."""

from __future__ import annotations

import pytest

from cache import UnifiedRadixCache
from cache.basics.errors import CacheError
from cache.observe.events import Cause, EventKind, EventLog
from cache.checks.invariants import check_invariants
from cache.pools import prefix_fingerprints
from workbench.model.scenarios.errors import ScenarioError
from workbench.model.scenarios.scenario import scenario_from_records
from workbench.model.timeline.runner import Runner

HOST = {"write_policy": "write_through", "host_kv_size": 20, "load_back_threshold": 2}


def cache_with(components=("full",), page_size=4, hicache=HOST, **extra) -> UnifiedRadixCache:
    return UnifiedRadixCache(components=components, kv_size=32, page_size=page_size, hicache=hicache, **extra)


def running(cache, tokens=(1, 2, 3, 4, 5, 6), more=(7, 8, 9), rid="a"):
    req = cache.new_request(list(tokens), rid=rid)
    if more:
        cache.extend_request(req, list(more))
    return req


def state(cache) -> tuple:
    host = cache.host_available_size() if cache.host is not None else None
    return (cache.kv_pool.available_size(), host, tuple(cache.requests), tuple(cache.retracted),
            cache.tree.evictable_size("full"), len(cache.tree.nodes))


def test_a_backup_holds_the_row_page_padded_and_restore_brings_back_its_kv():
    cache = cache_with()
    req = running(cache)
    assert cache.retract(req, backup=True)
    assert req.retraction_backup.host_indices.shape[0] == 12  # 9 tokens on 3 pages
    assert cache.host_available_size() == 8 and cache.kv_pool.available_size() == 32
    assert not cache.requests and cache.retracted == {"a": req} and not check_invariants(cache)
    assert (req.cache_protected_len, req.lock, req.kv_len) == (0, None, 0)
    other = cache.alloc_kv(4)  # the device slots go to someone else meanwhile
    cache.restore(req)
    cache.free_kv([other])
    assert req.kv_len == 9 and cache.requests == {"a": req} and not cache.retracted
    assert req.retraction_backup is None and cache.host_available_size() == 20
    # the data came from the host: the fresh slots hold the row's fingerprints
    assert cache.kv_buffer.data[req.kv_indices].tolist() == prefix_fingerprints(req.fill_ids, cache.device).tolist()
    assert not check_invariants(cache)
    cache.extend_request(req, [10])
    cache.release_kv_cache(req)
    assert not check_invariants(cache)


def test_restore_copies_host_data_not_a_recomputation():
    cache = cache_with()
    req = running(cache)
    cache.retract(req, backup=True)
    cache.host.kv.buffer.data[req.retraction_backup.host_indices[0]] = 12345  # corrupt the host copy
    cache.restore(req)
    assert int(cache.kv_buffer.data[req.kv_indices[0]]) == 12345


def test_retract_without_backup_frees_the_row_and_keeps_the_tree_part():
    cache = cache_with(hicache=None)
    req = running(cache, more=())
    cache.checkpoint(req)  # the tree keeps [0, 4); the request its tail [4, 6)
    cache.extend_request(req, [7, 8, 9])
    assert cache.retract(req)
    assert req.retraction_backup is None and cache.kv_pool.available_size() == 28
    assert cache.tree.evictable_size("full") == 4 and not check_invariants(cache)
    with pytest.raises(CacheError, match="without a backup"):
        cache.restore(req)
    assert cache.abort(req) == "retracted" and not cache.retracted


def test_evict_frees_only_the_shortfall():
    for evict, available, evictable in ((24, 24, 8), (16, 16, 16)):
        cache = cache_with(hicache=None)
        for rid, start in (("x", 20), ("y", 40)):  # two leaves of 8 evictable tokens
            cache.release_kv_cache(running(cache, tokens=range(start, start + 8), more=(), rid=rid))
        req = running(cache)
        cache.retract(req, evict=evict)  # 16 free after the retract: only what evict asks beyond that is evicted
        assert (cache.kv_pool.available_size(), cache.tree.evictable_size("full")) == (available, evictable)


def test_a_backup_the_host_cannot_hold_aborts_the_request():
    cache = cache_with(hicache={**HOST, "host_kv_size": 8})
    req = running(cache)
    assert cache.retract(req, backup=True) is False
    assert not cache.retracted and not cache.requests and req.retraction_backup is None
    assert cache.host_available_size() == 8 and cache.kv_pool.available_size() == 32 and not check_invariants(cache)


@pytest.mark.parametrize("case, message", [
    ("no host", "needs the host tier"),
    ("mamba", "no request with Mamba"),
])
def test_a_backup_is_refused_where_sglang_has_none_and_nothing_changes(case, message):
    if case == "no host":
        cache = cache_with(hicache=None)
    else:
        cache = UnifiedRadixCache(components=("full", "mamba"), kv_size=32, page_size=1, mamba_size=4,
                                  hicache={"write_policy": "write_through"})
    req = running(cache)
    before = state(cache)
    with pytest.raises(CacheError, match=message):
        cache.retract(req, backup=True)
    assert state(cache) == before and cache.requests == {"a": req}


def test_restore_refuses_a_backup_of_another_size_and_changes_nothing():
    cache = cache_with()
    req = running(cache)
    cache.retract(req, backup=True)
    req.output_ids.append(11)  # the request now claims one token more than was backed up
    before = state(cache)
    with pytest.raises(CacheError, match="host slots"):
        cache.restore(req)
    assert state(cache) == before


def test_a_request_not_running_is_refused():
    cache = cache_with()
    req = running(cache)
    with pytest.raises(CacheError, match="not retracted"):
        cache.restore(req)
    cache.retract(req, backup=True)
    with pytest.raises(CacheError, match="not running"):
        cache.retract(req)
    with pytest.raises(CacheError, match="not running"):
        cache.extend_request(req, [1])


def test_abort_of_a_running_request_caches_its_kv():
    cache = cache_with(hicache=None)
    req = running(cache)
    assert cache.abort(req) == "running"
    assert cache.tree.evictable_size("full") == 8 and cache.kv_pool.available_size() == 24  # 0.5.23 inserts it
    assert not check_invariants(cache)


def test_the_events_name_the_backup_its_restore_and_its_discard():
    cache = cache_with()
    log = EventLog(cache.events)
    req = running(cache)
    log.take()
    cache.retract(req, backup=True)
    retract = log.take()
    assert {e.op for e in retract} == {"retract"} and {e.request for e in retract} == {"a"}
    assert any(e.kind is EventKind.BACKUP and e.cause is Cause.RETRACT and e.tokens == 9 for e in retract)
    assert any(e.kind is EventKind.ALLOC and e.component == "full" and e.cause is Cause.RETRACT and e.tokens == 12
               for e in retract)
    cache.restore(req)
    restore = log.take()
    assert any(e.kind is EventKind.LOAD and e.cause is Cause.RETRACT for e in restore)
    assert any(e.kind is EventKind.FREE and e.cause is Cause.RETRACT and e.tokens == 12 for e in restore)
    cache.retract(req, backup=True)
    log.take()
    cache.abort(req)
    assert [(e.op, e.kind, e.tokens) for e in log.take()] == [("abort", EventKind.FREE, 12)]


def test_swa_backs_up_its_window_and_restores_it():
    cache = UnifiedRadixCache(components=("full", "swa"), kv_size=32, page_size=2, sliding_window=4, swa_kv_size=32,
                              hicache={"write_policy": "write_through", "host_kv_size": 18, "host_swa_size": 18})
    req = running(cache, tokens=range(1, 8), more=())
    cache.extend_request(req, [8, 9, 10, 11, 12], slide=True)
    cache.retract(req, backup=True)
    saved = req.retraction_backup
    assert (saved.swa_start, saved.swa_host_indices.shape[0]) == (8, 4) and not check_invariants(cache)
    cache.restore(req)
    swa = cache.by_name["swa"]
    window = swa.pool.translate(req.kv_indices[8:])
    assert swa.device_store.data[window].tolist() == prefix_fingerprints(req.fill_ids, cache.device)[8:].tolist()
    assert cache.host_available_size("swa") == 18 and not check_invariants(cache)


def run(config: dict, *steps: dict):
    header = {"schema": 1, "scenario": {"name": "t"}, "config": config}
    return Runner(scenario_from_records(header, list(steps))).run()


def test_a_retracted_name_stays_in_use_until_it_is_aborted():
    config = {"components": ["full"], "page_size": 4, "kv_size": 32, "hicache": HOST}
    prefill = {"op": "req_prefill", "req": "r1", "tokens": [1, 2, 3, 4, 5]}
    timeline = run(config, prefill, {"op": "retract", "req": "r1", "backup": True}, {"op": "restore", "req": "r1"},
                   {"op": "retract", "req": "r1"}, {"op": "abort", "req": "r1"}, dict(prefill))
    assert timeline.passed, [(r.index, r.error) for r in timeline.records]
    with pytest.raises(ScenarioError, match="already running"):
        run(config, prefill, {"op": "retract", "req": "r1"}, dict(prefill))
    with pytest.raises(ScenarioError, match="unknown or finished request"):
        run(config, prefill, {"op": "abort", "req": "r1"}, {"op": "restore", "req": "r1"})
    timeline = run(config, prefill, {"op": "retract", "req": "r1"},
                   {"op": "restore", "req": "r1", "expect_error": "without a backup"})
    assert timeline.passed
