"""Host-tier ops (``[config] hicache``): ``load_back`` (bring a key's host-only prefix
back to the device), ``evict_host`` (free host copies) and ``flush``
(``check_hicache_events``: acknowledge the transfers held in flight)."""

from __future__ import annotations

from .spec import COUNT, HOST, HOST_PARTS, NAME, TOKENS, Field, OpSpec, declare


def run_load_back(session, f: dict) -> dict:
    from cache import RadixKey  # torch: only once an op runs

    result = session.cache.load_back(RadixKey(f["key"], f.get("extra_key")), f.get("mem_quota"))
    return {"loaded": result.loaded, "host_hit_length": result.host_hit_length}


LOAD_BACK = declare(OpSpec(
    "load_back", "bring a key's host-only prefix back to the device (refused past mem_quota)",
    run_load_back,
    fields=(Field("key", TOKENS, required=True), Field("extra_key", NAME, placeholder="NS"),
            Field("mem_quota", COUNT)),
    results=("loaded", "host_hit_length"),
    needs=(HOST,),
    run_sglang=lambda side, f: side.host.op_load_back(f),  # workbench/bridge/sglang_host.py
))


def run_evict_host(session, f: dict) -> dict:
    cache = session.cache
    out = {"full_host_evicted": cache.evict_host(f.get("full", 0))}
    for component, amount in f.items():
        if component != "full":
            out[f"{component}_host_evicted"] = cache.evict_host(amount, component)
    return out


EVICT_HOST = declare(OpSpec(
    "evict_host", "free host copies: N units of each named component's host pool",
    run_evict_host,
    per_component=HOST_PARTS, per_component_result="_host_evicted",
    results=("full_host_evicted",),
    needs=(HOST,),
    run_sglang=lambda side, f: side.host.op_evict_host(f),
))

FLUSH = declare(OpSpec(
    "flush", "acknowledge the transfers held in flight (check_hicache_events)",
    lambda session, f: {"completed": session.cache.check_hicache_events()},
    results=("completed",),
    needs=(HOST,),
    run_sglang=lambda side, f: side.host.op_flush(f),
))
