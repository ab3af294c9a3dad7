"""Time the invariant checker on realistic trees (development tool, not run by CI).

A tree is grown through the request flow (admit, finish) with keys that share random
prefixes, so it has splits, SWA and Mamba tombstones (periodic evictions; Mamba keeps
no state on split parents) and running requests and bare locks holding receipts. Then
it times the full sweep and the per-step check of one more request (admit + finish)
on the nodes that step touched (``tree.take_touched()``), best of N each.

    .venv/bin/python tools/bench_invariants.py [--nodes 1000 10000] [--repeat 5] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cache import EvictParams, UnifiedRadixCache, check_invariants

CONFIGS = {
    "full": dict(components=("full",)),
    "full+swa": dict(components=("full", "swa"), sliding_window=4),
    "full+swa+mamba": dict(components=("full", "swa", "mamba"), sliding_window=4),
}


def build(config: str, nodes: int, seed: int = 1, running: int = 20) -> UnifiedRadixCache:
    """A cache whose tree has about ``nodes`` nodes, grown by the request flow."""
    rng = random.Random(seed)
    kv = max(4096, nodes * 12)
    cache = UnifiedRadixCache(device="cpu", page_size=1, kv_size=kv, mamba_size=nodes + 512, **CONFIGS[config])
    keys: list[list[int]] = []

    def next_key() -> list[int]:
        if keys and rng.random() < 0.85:  # extend a cut of an earlier key: shared prefixes
            base = rng.choice(keys)
            base = base[: rng.randint(1, len(base))]
        else:
            base = []
        return base + [rng.randrange(1000) for _ in range(rng.randint(1, 10))]

    done = 0
    while len(cache.tree.nodes) < nodes:
        key = next_key()
        keys.append(key)
        cache.release_kv_cache(cache.new_request(key))
        done += 1
        if done % 500 == 0:  # some evictions: deleted leaves, SWA and Mamba tombstones
            cache.evict(EvictParams(num_tokens=30, swa_num_tokens=60, mamba_num=20))
    for _ in range(running):  # running requests hold locks on their prefixes
        cache.new_request(next_key())
    for _ in range(running):  # and a few bare locks on matched nodes
        node = rng.choice(list(cache.tree.nodes))
        cache.inc_lock_ref(node)
    return cache


def best_ms(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--profile", action="store_true", help="cProfile one sweep per tree")
    args = ap.parse_args()
    print(f"{'config':<16}{'nodes':>7}{'leaves':>8}{'receipts':>9}{'full ms':>10}{'touched':>8}{'step ms':>9}")
    for config in args.configs:
        for n in args.nodes:
            cache = build(config, n)
            tree = cache.tree
            assert check_invariants(cache) == [], check_invariants(cache)[:3]
            full = best_ms(lambda: check_invariants(cache), args.repeat)
            tree.take_touched()
            cache.release_kv_cache(cache.new_request(tree.nodes[max(tree.nodes)].token_ids[:3] + [7, 7, 7]))
            touched = tree.take_touched()
            step = best_ms(lambda: check_invariants(cache, touched=touched), args.repeat * 4)
            print(f"{config:<16}{len(tree.nodes):>7}{len(tree.leaves):>8}{len(tree.live_receipts):>9}"
                  f"{full:>10.1f}{len(touched):>8}{step:>9.2f}")
            if args.profile:
                prof = cProfile.Profile()
                prof.runcall(check_invariants, cache)
                pstats.Stats(prof).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
