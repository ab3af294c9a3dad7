"""``urc bench``: the seeded shared-prompt workload, timing only the cache calls.

Workload (same generator and seed semantics as the SGLang oracle's bench): 8 shared
prompts (64..1024 tokens, Zipf-weighted) plus random suffixes, 64..2048 tokens per
request, page 1, a 65,536-token pool. Per request: match_prefix -> inc_lock_ref ->
[evict the shortfall] -> allocate (untimed) -> insert(prev_prefix_len=match) ->
dec_lock_ref.
"""

from __future__ import annotations

import dataclasses
import gc
import random
import statistics
import time
from typing import Optional

from cache import CacheError, EvictParams, InsertParams, RadixKey, UnifiedRadixCache, check_invariants

from ..model.scenarios import workload
from ..model.ops.evict import EVICT
from ..model.ops.keys import INSERT, MATCH
from ..model.ops.locks import LOCK, UNLOCK
from ..model.ops.spec import BASE, stateful, windowed

OPS = tuple(spec.name for spec in (MATCH, LOCK, EVICT, INSERT, UNLOCK))


@dataclasses.dataclass
class BenchConfig:
    requests: int = 5000
    seed: int = 0
    prompts: int = 8
    min_len: int = 64
    max_len: int = 2048
    page_size: int = 1
    kv_size: int = 65536
    components: tuple[str, ...] = (BASE,)
    sliding_window: int = 128
    mamba_size: int = 256
    device: str = "cpu"
    repeat: float = 0.0  # the share of requests repeating a recent one whole (workload.build_workload)

    def cache(self) -> UnifiedRadixCache:
        extra = {}
        if windowed(self.components):
            extra["sliding_window"] = self.sliding_window
        if stateful(self.components):
            extra["mamba_size"] = self.mamba_size
        return UnifiedRadixCache(
            components=self.components, page_size=self.page_size, kv_size=self.kv_size, device=self.device, **extra
        )


def build_workload(cfg: BenchConfig) -> list[list[int]]:
    return workload.build_workload(cfg.requests, cfg.seed, cfg.prompts, cfg.min_len, cfg.max_len, cfg.page_size,
                                   cfg.repeat)


def stats(samples_ns: list[int]) -> dict:
    if not samples_ns:
        return {"n": 0}
    us = sorted(x / 1000.0 for x in samples_ns)
    return {
        "n": len(us),
        "mean_us": round(statistics.fmean(us), 2),
        "p50_us": round(us[len(us) // 2], 2),
        "p99_us": round(us[min(len(us) - 1, int(len(us) * 0.99))], 2),
    }


def run_workload(cfg: BenchConfig, observe: bool = False, workload: Optional[list[list[int]]] = None) -> dict:
    workload = workload or build_workload(cfg)
    cache = cfg.cache()
    cache.fingerprints = False  # time the cache, not the stand-in for the model's KV writes
    events = [0]
    if observe:
        cache.events.subscribe(lambda e: events.__setitem__(0, events[0] + 1))
    keys = [(RadixKey(t), t) for t in workload]
    lat: dict[str, list[int]] = {op: [] for op in OPS}
    by_len: dict[str, dict[int, list[int]]] = {MATCH.name: {}, INSERT.name: {}}
    pc = time.perf_counter_ns
    ps = cfg.page_size
    matched = total = 0
    pool = cache.kv_pool
    swa = cache.by_name.get(windowed(cfg.components))
    mamba = cache.by_name.get(stateful(cfg.components))
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for key, tokens in keys:
            n = len(key) // ps * ps
            total += n
            t0 = pc()
            m = cache.match_prefix(key)
            t1 = pc()
            node = m.last_device_node
            receipt = cache.inc_lock_ref(node)
            t2 = pc()
            lat[MATCH.name].append(t1 - t0)
            lat[LOCK.name].append(t2 - t1)
            prefix = m.prefix_len
            matched += prefix
            need = n - prefix
            # the scheduler checkpoints a state at the branch point first (mamba)
            branch = m.mamba_branching_seqlen if mamba is not None else None
            if branch is not None and not prefix < branch < n:
                branch = None
            short = EvictParams(
                num_tokens=max(0, pool.pages_for(need) * ps - pool.available_size()),
                swa_num_tokens=max(0, swa.peer_shortfall(need)) if swa else 0,
                mamba_num=max(0, (2 if branch else 1) - mamba.available_size()) if mamba else 0,
            )
            if short.num_tokens or short.swa_num_tokens or short.mamba_num:
                t0 = pc()
                cache.evict(short)
                lat[EVICT.name].append(pc() - t0)
            try:
                fresh = cache.alloc_kv(need, evict=False)
            except CacheError:  # everything else is locked: skip the request
                cache.dec_lock_ref(node, receipt)
                continue
            values = fresh if not prefix else _cat(m.device_indices, fresh)
            prev = prefix
            if branch is not None:
                state = cache.alloc_mamba_state(tokens[:branch])
                first = InsertParams(key[:branch], values[:branch], state, prev_prefix_len=prefix)
                t0 = pc()
                r1 = cache.insert(first)
                lat[INSERT.name].append(pc() - t0)
                if r1.mamba_exist:
                    mamba.pool.free(first.mamba_value)
                values = _cat(cache.path_device_indices(r1.last_device_node), values[branch:])
                prev = branch
            state = cache.alloc_mamba_state(tokens[:n]) if mamba is not None else None
            params = InsertParams(key, values, state, prev_prefix_len=prev)
            t0 = pc()
            result = cache.insert(params)
            t1 = pc()
            cache.dec_lock_ref(node, receipt)
            t2 = pc()
            if state is not None and result.mamba_exist:
                mamba.pool.free(state)
            lat[INSERT.name].append(t1 - t0)
            lat[UNLOCK.name].append(t2 - t1)
            bucket = 1 << (n.bit_length() - 1)
            by_len[MATCH.name].setdefault(bucket, []).append(lat[MATCH.name][-1])
            by_len[INSERT.name].setdefault(bucket, []).append(lat[INSERT.name][-1])
    finally:
        if gc_was:
            gc.enable()
    cache_ns = sum(sum(v) for v in lat.values())
    n_ops = sum(len(v) for v in lat.values())
    violations = check_invariants(cache)
    return {
        "ops": {op: stats(v) for op, v in lat.items()},
        "cache_ops_per_s": round(n_ops / (cache_ns / 1e9)) if cache_ns else None,
        "hit_rate": round(matched / total, 4) if total else None,
        "events": events[0] if observe else None,
        "nodes": len(cache.tree.nodes) - 1,
        "by_key_length": {
            op: {f"{b}..{2 * b - 1}": stats(v)["mean_us"] for b, v in sorted(buckets.items())}
            for op, buckets in by_len.items()
        },
        "invariants_ok": not violations,
        "violations": [str(v) for v in violations[:5]],
    }


def _cat(a, b):
    import torch

    return torch.cat([a, b])


def run_tree_size(num_nodes: int, samples: int = 2000, seed: int = 1, device: str = "cpu") -> dict:
    """Per-op cost on a tree of ``num_nodes`` leaves under one shared prompt."""
    rng = random.Random(seed)
    suffix = 16
    prompt = [rng.randrange(1, 32000) for _ in range(256)]
    cache = UnifiedRadixCache(kv_size=256 + (num_nodes + samples + 16) * suffix, device=device)
    seqs = []
    for i in range(num_nodes):
        toks = prompt + [i + 100_000] + [rng.randrange(1, 32000) for _ in range(suffix - 1)]
        seqs.append(toks)
        slots = cache.kv_pool.alloc(len(toks))
        cache.insert(InsertParams(RadixKey(toks), slots))
    pc = time.perf_counter_ns
    lat: dict[str, list[int]] = {op: [] for op in OPS}
    built = len(cache.tree.nodes) - 1
    gc.disable()
    try:
        for j in range(samples):
            key = RadixKey(seqs[rng.randrange(num_nodes)][:-4] + [rng.randrange(1, 32000) for _ in range(8)])
            t0 = pc()
            m = cache.match_prefix(key)
            t1 = pc()
            receipt = cache.inc_lock_ref(m.last_device_node)
            t2 = pc()
            fresh = cache.kv_pool.alloc(len(key) - m.prefix_len)
            params = InsertParams(key, _cat(m.device_indices, fresh), prev_prefix_len=m.prefix_len)
            t3 = pc()
            cache.insert(params)
            t4 = pc()
            cache.dec_lock_ref(m.last_device_node, receipt)
            t5 = pc()
            cache.evict(EvictParams(num_tokens=suffix))
            t6 = pc()
            lat[MATCH.name].append(t1 - t0)
            lat[LOCK.name].append(t2 - t1)
            lat[INSERT.name].append(t4 - t3)
            lat[UNLOCK.name].append(t5 - t4)
            lat[EVICT.name].append(t6 - t5)
    finally:
        gc.enable()
    return {"nodes": built, "ops": {op: stats(v)["mean_us"] for op, v in lat.items()}}


# SGLang v0.5.23 on the same workload, 2-core CPU (Full, page 1), mean µs per call.
SGLANG_PYTHON = {"match": 38, "insert": 59, "evict": 132, "lock": 6, "unlock": 11}
SGLANG_RUST = {"match": 12, "insert": 28, "evict": 87}


def targets_met(ops: dict) -> dict[str, bool]:
    """Our target: >= 3x faster than SGLang's Python core and >= 1.5x its Rust core."""
    out = {}
    for op, py in SGLANG_PYTHON.items():
        limit = py / 3
        if op in SGLANG_RUST:
            limit = min(limit, SGLANG_RUST[op] / 1.5)
        out[op] = ops[op].get("mean_us", float("inf")) <= limit
    return out


def full_report(cfg: BenchConfig, tree_sizes: tuple[int, ...] = (1_000, 100_000)) -> dict:
    workload = build_workload(cfg)
    plain = run_workload(cfg, workload=workload)
    observed = run_workload(cfg, observe=True, workload=workload)
    scaling = {str(n): run_tree_size(n, device=cfg.device) for n in tree_sizes}
    return {
        "config": dataclasses.asdict(cfg),
        "no_observer": plain,
        "with_observer": observed,
        "tree_size": scaling,
        "sglang_v0_5_23": {"python": SGLANG_PYTHON, "rust": SGLANG_RUST} if cfg.components == (BASE,) else None,
        "targets_met": targets_met(plain["ops"]) if cfg.components == (BASE,) else {},
    }


def print_report(report: dict, console) -> None:
    from rich.table import Table

    plain, observed = report["no_observer"], report["with_observer"]
    comps = "+".join(report["config"]["components"])
    table = Table(title=f"urc bench — {comps}, {report['config']['requests']} requests, hit rate {plain['hit_rate']}")
    for col in ("op", "n", "mean µs", "p50 µs", "p99 µs", "observed mean µs", "SGLang py / rust", "target met"):
        table.add_column(col, justify="right")
    for op in OPS:
        s, o = plain["ops"][op], observed["ops"][op]
        ref = f"{SGLANG_PYTHON.get(op, '-')} / {SGLANG_RUST.get(op, '-')}" if report["sglang_v0_5_23"] else "-"
        met = report["targets_met"].get(op)
        table.add_row(op, str(s.get("n", 0)), str(s.get("mean_us")), str(s.get("p50_us")), str(s.get("p99_us")),
                      str(o.get("mean_us")), ref, "-" if met is None else "yes" if met else "NO")
    console.print(table)
    console.print(f"cache ops/s: {plain['cache_ops_per_s']:,} (observed: {observed['cache_ops_per_s']:,}, "
                  f"{observed['events']:,} events)")
    for op in (MATCH.name, INSERT.name):
        console.print(f"{op} mean µs by key length: {plain['by_key_length'][op]}")
    for size, row in report["tree_size"].items():
        console.print(f"tree of {row['nodes']:,} nodes: mean µs {row['ops']}")
