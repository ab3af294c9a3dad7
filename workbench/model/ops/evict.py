"""``evict`` (free N units of any components, SGLang's ``evict``) and ``check`` (a
step that only checks: the state fields and invariants after everything before it)."""

from __future__ import annotations

from typing import Optional

from .spec import DEVICE, FuzzRule, OpSpec, declare, holds_states, windowed

# the components SGLang 0.5.23's evict takes: ours -> (its EvictParams field, its EvictResult field)
SGLANG_FIELDS = {"full": ("num_tokens", "num_tokens_evicted"), "swa": ("swa_num_tokens", "swa_num_tokens_evicted"),
                 "mamba": ("mamba_num", "mamba_num_evicted")}


def run_evict(driver, f: dict) -> dict:
    from cache import EvictParams  # torch: only once an op runs

    result = driver.cache.evict(EvictParams.of(f))
    named = _evicted(result)  # reported whatever the components, as SGLang does
    return {**named, **{f"{c}_evicted": n for c, n in result.by_component.items() if f"{c}_evicted" not in named}}


def sglang_evict(side, f: dict) -> dict:
    params = side.sg.EvictParams(**{asked: f.get(c, 0) for c, (asked, _) in SGLANG_FIELDS.items()})
    return {name: int(n) for name, n in _evicted(side.cache.evict(params)).items()}


def _evicted(result) -> dict:
    """``<component>_evicted`` for each component an EvictResult (ours or SGLang's) reports."""
    return {f"{c}_evicted": getattr(result, evicted) for c, (_, evicted) in SGLANG_FIELDS.items()}


def fuzz_evict(gen) -> dict:
    step = {"op": EVICT.name}
    comps = gen.config.components
    for c in gen.rng.sample(list(comps), gen.rng.randint(1, len(comps))):
        step[c] = gen.rng.randint(1, 3 if holds_states(c) else 4 * gen.page)
    return step


def record_evict(mapper, asked: dict[str, int], evicted: dict[str, int], for_alloc: bool) -> dict:
    """``evict`` replays as itself; ``evict_for_alloc`` (which evicts until the
    pools reach a target) as an evict of what it evicted: the same victims, in
    the same order, when the two trees agree."""
    amounts = evicted if for_alloc else asked
    step: dict = {"op": EVICT.name, **{c: n for c, n in amounts.items() if c in mapper.components and n}}
    step["expect"] = {f"{c}_evicted": evicted.get(c, 0) for c in SGLANG_FIELDS if c in mapper.components}
    if for_alloc:
        asked_text = ", ".join(f"{c}={n}" for c, n in asked.items() if n) or "nothing"
        step["description"] = f"evict_for_alloc({asked_text}): recorded as what it evicted"
    return step


def _recorded_evict(mapper, call):
    params, result = call.arg(0, "params"), call.result
    asked = {c: getattr(params, field) for c, (field, _) in SGLANG_FIELDS.items()}
    evicted = {c: getattr(result, field) for c, (_, field) in SGLANG_FIELDS.items()}
    return record_evict(mapper, asked, evicted, call.name == "evict_for_alloc")


def _evict_everything(config: dict) -> Optional[dict]:
    """A step evicting each device pool's whole size: what a long run's filler steps did."""
    kv = config.get("kv_size", 1024)
    if type(kv) is not int:
        return None
    components = config.get("components", ["full"])
    sizes = {"full": kv, "swa": config.get("swa_kv_size") or kv, "mamba": config.get("mamba_size")}
    amounts = {name: size for name, size in sizes.items() if name in components and type(size) is int and size > 0}
    return {"op": EVICT.name, **amounts} if amounts else None


EVICT = declare(OpSpec(
    "evict", "free at least N units of each named component, least recently used first",
    run_evict,
    per_component=DEVICE, per_component_result="_evicted",
    results=tuple(f"{c}_evicted" for c in SGLANG_FIELDS), reports_all_results=True,
    run_sglang=sglang_evict,
    fuzz=(FuzzRule(2, lambda gen: 10 if windowed(gen.config.components) else 7, fuzz_evict),),
    records=("evict", "evict_for_alloc"), record=_recorded_evict, records_nested=True,
    describe=lambda f: " ".join([EVICT.name] + [f"{k}={v}" for k, v in f.items()]),
    frees=_evict_everything,
))

CHECK = declare(OpSpec(
    "check", "change nothing: check the state fields and invariants here",
    lambda driver, f: None,
    run_sglang=lambda side, f: None,
    read_only=True,
))
