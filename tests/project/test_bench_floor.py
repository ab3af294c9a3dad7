"""The bare-tree floor is only a baseline, but its numbers mean something only if it
does the same tree work: its match and insert return what the cache returns."""

from __future__ import annotations

import random

from cache import InsertParams, RadixKey, UnifiedRadixCache
from workbench.bench.floor import BareTree, floor_timed


def test_the_floor_answers_like_the_cache_on_random_shared_prefixes():
    rng = random.Random(7)
    cache = UnifiedRadixCache(components=("full",), kv_size=1 << 16, device="cpu")
    cache.fingerprints = False
    floor = BareTree()
    prompts = [[rng.randrange(1, 50) for _ in range(rng.randint(1, 12))] for _ in range(4)]
    for _ in range(300):
        key = rng.choice(prompts)[: rng.randint(0, 12)] + [rng.randrange(1, 4) for _ in range(rng.randint(0, 6))]
        packed = RadixKey(key).data
        if rng.random() < 0.5:
            assert floor.match(packed) == cache.match_prefix(RadixKey(key)).prefix_len, key
        else:
            ours = cache.insert(InsertParams(RadixKey(key), cache.alloc_kv(len(key)))).prefix_len
            assert floor.insert(packed) == ours, key


def test_floor_timed_times_only_match_and_insert():
    steps = [("insert", {"key": [1, 2, 3]}), ("match", {"key": [1, 2]}), ("lock", {"match": "m", "as": "L"}),
             ("insert", {"key": [1, 2, 4]}), ("evict", {"full": 1})]
    report = floor_timed(iter(steps))
    assert {op: s["n"] for op, s in report.items()} == {"insert": 2, "match": 1}
    assert all(s["mean_us"] > 0 for s in report.values())
