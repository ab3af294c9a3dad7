"""The whole cache state, beyond the snapshot: what a refused op must leave exactly as
it was (shared by the fault-injection and the pool-pressure tests)."""

from __future__ import annotations

import dataclasses

from cache import UnifiedRadixCache
from workbench.model.timeline.driver import CacheDriver


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


def deep_state(cache: UnifiedRadixCache, driver: CacheDriver | None = None) -> dict:
    """The snapshot (op_seq aside, as the runner's same_state compares it) plus what it
    does not show: which pages are free in every pool, the Full->SWA translation
    table, every running request's row and state slots, and the driver's names."""
    state = {"snapshot": dataclasses.replace(cache.snapshot(), op_seq=0)}
    state["free.full"] = sorted(cache.kv_pool.free_pages_list())
    for component in cache.components[1:]:
        state[f"free.{component.name}"] = sorted(component.pool.allocator.free_pages_list())
    if "swa" in cache.by_name:
        state["swa.mapping"] = cache.by_name["swa"].pool.mapping.tolist()
    state["requests"] = {rid: _req_state(cache, req) for rid, req in cache.requests.items()}
    if driver is not None:
        names = (driver.matches, driver.locks, driver.released, driver.reqs, driver.finished)
        state["names"] = tuple(sorted(d) for d in names)
    return state


def assert_same(before: dict, after: dict) -> None:
    for key in before:
        assert after[key] == before[key], f"{key} changed"
    assert after == before
