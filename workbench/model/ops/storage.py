"""Storage-tier ops (``[config] hicache.storage``): ``prefetch`` (SGLang's
``prefetch_from_storage``, started when a request arrives), ``prefetch_progress``
(``check_prefetch_progress``, the admission poll, with the tokens the prefetch put on
the host) and ``storage_hit`` (``query_storage_hit_length``). A ``flush`` moves the
prefetches in flight on (ops/host.py)."""

from __future__ import annotations

from .spec import NAME, STORAGE, TOKENS, Field, FuzzRule, OpSpec, declare

RID = Field("rid", NAME, required=True, positional=True, placeholder="RID")


def _stored(weight: int):
    """A fuzz weight that holds only when the fuzzed config has a storage tier."""
    return lambda gen: weight if gen.config.storage else 0


def _key(f: dict):
    from cache import RadixKey  # torch: only once an op runs

    return RadixKey(f["key"], f.get("extra_key"), f.get("cache_salt"))


def run_prefetch(driver, f: dict) -> dict:
    issue = driver.cache.prefetch_from_storage(f["rid"], _key(f))
    return {"issued": issue.issued, "prefetch_tokens": issue.tokens}


def fuzz_prefetch(gen) -> dict:
    """Mostly a whole earlier key (its pages may be in storage only by now), else a new one."""
    gen.prefetches = (gen.prefetches + [f"p{gen.count}"])[-4:]
    key = list(gen.rng.choice(gen.keys)) if gen.keys and gen.rng.random() < 0.7 else gen.key(min_len=gen.page)
    return {"op": PREFETCH.name, "rid": gen.prefetches[-1], "key": key}


def describe_prefetch(f: dict) -> str:
    return f"prefetch {f['rid']}: ask storage for what it holds of {len(f['key'])} tokens after their match"


PREFETCH = declare(OpSpec(
    "prefetch", "start a prefetch from storage of what follows a request's match, up to its prefix limit: its input less one token (prefetch_from_storage)",
    run_prefetch,
    fields=(RID, Field("key", TOKENS, required=True, nonempty=True), Field("extra_key", NAME, placeholder="NS"),
            Field("cache_salt", NAME, placeholder="SALT")),
    results=("issued", "prefetch_tokens"),
    needs=(STORAGE,),
    run_sglang=lambda side, f: side.host.storage.prefetch.op_prefetch(side, f),  # workbench/bridge/sglang_prefetch.py
    fuzz=(FuzzRule(60, _stored(6), fuzz_prefetch),),
    describe=describe_prefetch,
))


def run_progress(driver, f: dict) -> dict:
    cache = driver.cache
    done = cache.check_prefetch_progress(f["rid"])
    return {"done": done, "prefetched": cache.pop_prefetch_loaded_tokens(f["rid"]) if done else 0}


PREFETCH_PROGRESS = declare(OpSpec(
    "prefetch_progress", "the admission poll of a prefetch: done (its stop policy may cut it here) and the tokens "
    "it put on the host (check_prefetch_progress)",
    run_progress,
    fields=(RID,),
    results=("done", "prefetched"),
    needs=(STORAGE,),
    run_sglang=lambda side, f: side.host.storage.prefetch.op_progress(side, f),
    fuzz=(FuzzRule(61, lambda gen: 3 if gen.config.storage and gen.prefetches else 0,
                   lambda gen: {"op": PREFETCH_PROGRESS.name, "rid": gen.rng.choice(gen.prefetches)}),),
))


STORAGE_HIT = declare(OpSpec(
    "storage_hit", "how many tokens after a key's match storage holds (query_storage_hit_length)",
    lambda driver, f: {"storage_hit_length": driver.cache.query_storage_hit_length(_key(f))},
    fields=(Field("key", TOKENS, required=True, nonempty=True), Field("extra_key", NAME, placeholder="NS"),
            Field("cache_salt", NAME, placeholder="SALT")),
    results=("storage_hit_length",),
    needs=(STORAGE,),
    run_sglang=lambda side, f: side.host.storage.prefetch.op_storage_hit(side, f),
    fuzz=(FuzzRule(62, _stored(1), lambda gen: {"op": STORAGE_HIT.name, "key": gen.key(min_len=gen.page)}),),
))
