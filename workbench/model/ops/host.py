"""Host-tier ops (``[config] hicache``): ``load_back`` (bring a key's host-only prefix
back to the device), ``evict_host`` (free host copies) and ``flush``
(``check_hicache_events``: acknowledge the transfers held in flight)."""

from __future__ import annotations

from typing import Optional

from .spec import BASE, COUNT, HOST, HOST_PARTS, NAME, TOKENS, Field, FuzzRule, OpSpec, declare, holds_states, host_parts


def _hosted(weight: int):
    """A fuzz weight that holds only when the fuzzed config has a host tier."""
    return lambda gen: weight if gen.config.hicache else 0


def fuzz_load_back(gen) -> dict:
    step = {"op": LOAD_BACK.name, "key": gen.key(min_len=1)}
    if gen.rng.random() < 0.2:  # an admission budget that may refuse the load
        step["mem_quota"] = gen.rng.randint(0, 8 * gen.page)
    return step


def fuzz_evict_host(gen) -> dict:
    parts = host_parts(gen.config.components)
    step = {"op": EVICT_HOST.name}
    for c in gen.rng.sample(list(parts), gen.rng.randint(1, len(parts))):
        step[c] = gen.rng.randint(1, 2 if holds_states(c) else 4 * gen.page)
    return step


def run_load_back(driver, f: dict) -> dict:
    from cache import RadixKey  # torch: only once an op runs

    result = driver.cache.load_back(RadixKey(f["key"], f.get("extra_key"), f.get("cache_salt")), f.get("mem_quota"))
    return {"loaded": result.loaded, "host_hit_length": result.host_hit_length}


LOAD_BACK = declare(OpSpec(
    "load_back", "bring a key's host-only prefix back to the device (refused past mem_quota)",
    run_load_back,
    fields=(Field("key", TOKENS, required=True), Field("extra_key", NAME, placeholder="NS"), Field("cache_salt", NAME, placeholder="SALT"),
            Field("mem_quota", COUNT)),
    results=("loaded", "host_hit_length"),
    needs=(HOST,),
    refusal_changes="v0.5.23 locks what it would load before it decides; a refusal lets go, so the host-only "
                    "data moves to the host LRU's most recent end",
    run_sglang=lambda side, f: side.host.op_load_back(f),  # workbench/bridge/sglang_host.py
    fuzz=(FuzzRule(11, _hosted(5), fuzz_load_back),),
))


def run_evict_host(driver, f: dict) -> dict:
    cache = driver.cache
    out = {f"{BASE}_host_evicted": cache.evict_host(f.get(BASE, 0))}
    for component, amount in f.items():
        if component != BASE:
            out[f"{component}_host_evicted"] = cache.evict_host(amount, component)
    return out


def _evict_all_host(config: dict) -> Optional[dict]:
    """With a host tier, a step evicting Full's whole host pool."""
    kv, hicache = config.get("kv_size", 1024), config.get("hicache")
    if type(kv) is not int or not isinstance(hicache, dict):
        return None
    return {"op": EVICT_HOST.name, "full": hicache.get("host_kv_size") or 2 * kv + int(config.get("page_size", 1) or 1)}


EVICT_HOST = declare(OpSpec(
    "evict_host", "free host copies: N units of each named component's host pool",
    run_evict_host,
    per_component=HOST_PARTS, per_component_result="_host_evicted",
    results=("full_host_evicted",),
    needs=(HOST,),
    run_sglang=lambda side, f: side.host.op_evict_host(f),
    fuzz=(FuzzRule(12, _hosted(3), fuzz_evict_host),),
    frees=_evict_all_host,
))

FLUSH = declare(OpSpec(
    "flush", "acknowledge the transfers held in flight (check_hicache_events)",
    lambda driver, f: {"completed": driver.cache.check_hicache_events()},
    results=("completed",),
    needs=(HOST,),
    run_sglang=lambda side, f: side.host.op_flush(f),
    fuzz=(FuzzRule(13, _hosted(2), lambda gen: {"op": FLUSH.name}),),
))
