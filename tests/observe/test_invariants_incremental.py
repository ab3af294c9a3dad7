"""The per-step checker, ``check_invariants(cache, touched=ids)``, against the full sweep.

For every kind of corruption the checker's own tests inject (and the node corruptions a
step can cause: a lock count, a value, LRU membership, a tombstone, a parent link), the
per-step check given the corrupted node's id (or no id for a global counter or a pool)
reports the same violation names as the sweep. On clean trees both report nothing and
the probes themselves pass, so the per-step mode is not quietly running the sweep.
"""

from __future__ import annotations

import random

import pytest
import torch

from cache import EvictParams, UnifiedRadixCache, check_invariants
from cache.checks.incremental import probe

from conftest import Checked

CONFIGS = {
    "full-ps1": dict(components=("full",), page_size=1),
    "full-ps4": dict(components=("full",), page_size=4),
    "swa-ps1": dict(components=("full", "swa"), page_size=1, sliding_window=4),
    "swa-ps2": dict(components=("full", "swa"), page_size=2, sliding_window=4),
    "mamba-ps1": dict(components=("full", "mamba"), page_size=1),
    "hybrid-ps1": dict(components=("full", "swa", "mamba"), page_size=1, sliding_window=4),
    "hybrid-ps4": dict(components=("full", "swa", "mamba"), page_size=4, sliding_window=8),
}


def grow(config: str, seed: int, requests: int = 50) -> UnifiedRadixCache:
    """A tree grown by the request flow: shared prefixes, evictions (so tombstones),
    a few running requests and bare locks held, touched-node recording on."""
    rng = random.Random(seed)
    cache = UnifiedRadixCache(device="cpu", kv_size=4096, mamba_size=256, **CONFIGS[config])
    cache.tree.take_touched()
    keys: list[list[int]] = []
    ps = cache.page_size
    shortest = 64 + 2 * ps if "mamba" in cache.by_name and ps > 1 else 0  # Mamba tracks states every 64 tokens
    for _ in range(requests):
        base = rng.choice(keys)[: rng.randint(1, max(12 * ps, shortest))] if keys and rng.random() < 0.8 else []
        key = base + [rng.randrange(40) for _ in range(rng.randint(ps, 12 * max(1, ps // 2)))]
        key += [rng.randrange(40) for _ in range(shortest - len(key))]
        keys.append(key)
        req = cache.new_request(key)
        if rng.random() < 0.9:
            cache.release_kv_cache(req)
        if rng.random() < 0.15:
            cache.evict(EvictParams(num_tokens=8, swa_num_tokens=8 if "swa" in cache.by_name else 0,
                                    mamba_num=2 if "mamba" in cache.by_name else 0))
    for node_id in rng.sample(sorted(cache.tree.nodes), 2):
        cache.inc_lock_ref(node_id)
    return cache


def names(violations) -> list[str]:
    return sorted({v.name for v in violations})


def same_report(cache, ids) -> list[str]:
    """The sweep sees the corruption and the per-step check names it the same way."""
    full = names(check_invariants(cache))
    assert full, "the corruption must be visible to the full sweep"
    assert names(check_invariants(cache, touched=ids)) == full
    return full


def pick(cache, rng: random.Random, want=lambda node: True):
    nodes = [n for n in cache.tree.nodes.values() if n is not cache.tree.root and want(n)]
    if not nodes:
        pytest.skip("no node of that kind in this tree")
    return rng.choice(sorted(nodes, key=lambda n: n.id))


# ---- the corruptions of tests/observe/test_events_snapshot_invariants.py --------------------


@pytest.fixture
def small() -> Checked:
    checked = Checked(page_size=1, kv_size=64)
    checked.insert([1, 2, 3, 4])
    checked.insert([1, 2, 5, 6])
    return checked


def test_a_drifted_counter_is_named_without_ids(small):
    small.cache.tree.evictable[0] = 99
    assert "counter.evictable" in same_report(small.cache, ())


def test_a_stale_leaf_set_is_named_from_the_leaf(small):
    leaf = next(iter(small.cache.tree.leaves))
    small.cache.tree.leaves.discard(leaf)
    assert "leaf_set" in same_report(small.cache, [leaf.id])


def test_a_leaked_slot_is_named_without_ids(small):
    small.cache.kv_pool.alloc(3)
    assert "pool.full.balance" in same_report(small.cache, ())


def test_a_slot_owned_twice_is_named_from_the_node_holding_it(small):
    tree = small.cache.tree
    a, b = (n for n in tree.nodes.values() if n.children == {} and n is not tree.root)
    b.data[0].value = torch.cat([a.data[0].value[:1], b.data[0].value[1:]])
    assert "pool.full.owned_twice" in same_report(small.cache, [b.id])


def test_a_negative_lock_on_a_broken_node_is_reported_the_same_way(small):
    node = next(iter(small.cache.tree.leaves))
    node.data[0].lock_ref = -1
    node.children = None  # the probes trip over it: the sweep must still name it
    same_report(small.cache, [node.id])


def test_a_leaked_swa_lock_is_named_from_its_node():
    cache = grow("swa-ps1", 3)
    node = pick(cache, random.Random(3), lambda n: n.data[1].value is not None)
    node.data[1].lock_ref += 1
    assert "lock.unaccounted" in same_report(cache, [node.id])


def test_a_state_on_the_wrong_node_is_named_from_that_node():
    cache = grow("hybrid-ps1", 4)
    mamba = cache.by_name["mamba"]
    x, y = random.Random(4).sample([n for n in cache.tree.nodes.values() if n.data[mamba.index].value is not None], 2)
    mamba.pool.copy(y.data[mamba.index].value, x.data[mamba.index].value)
    assert "mamba.state_boundary" in same_report(cache, [x.id])


# ---- node corruptions, on every config -----------------------------------------------


def corrupt_lock(cache, node, i):
    node.data[i].lock_ref += 1


def corrupt_value_length(cache, node, i):
    node.data[0].value = node.data[0].value[: -cache.page_size]


def corrupt_value_slot(cache, node, i):  # the first page of another node
    other = next(n for n in cache.tree.nodes.values() if n is not node and n.data[0].value is not None and n.length)
    value = node.data[0].value.clone()
    value[: cache.page_size] = other.data[0].value[: cache.page_size]
    node.data[0].value = value


def corrupt_lru_membership(cache, node, i):
    cache.tree.lru[cache.components[i].name].remove(node)


def corrupt_tombstone(cache, node, i):  # data gone, counters and LRU not told
    node.data[i].value = None


def corrupt_parent_link(cache, node, i):
    node.parent = next(n for n in cache.tree.nodes.values() if n is not node.parent and n is not node)


NODE_CORRUPTIONS = {
    "lock_ref": (corrupt_lock, lambda n, i: True),
    "value_length": (corrupt_value_length, lambda n, i: n.data[0].value is not None),
    "value_slot": (corrupt_value_slot, lambda n, i: n.data[0].value is not None),
    "lru_membership": (corrupt_lru_membership, lambda n, i: i > 0 and n.data[i].value is not None),
    "tombstone": (corrupt_tombstone, lambda n, i: i > 0 and n.data[i].value is not None),
    "parent_link": (corrupt_parent_link, lambda n, i: not n.children),
}


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("kind", NODE_CORRUPTIONS)
def test_a_node_corruption_is_named_from_that_node_as_the_sweep_names_it(config, kind):
    corrupt, applies = NODE_CORRUPTIONS[kind]
    for seed in range(2):
        rng = random.Random(seed)
        cache = grow(config, seed)
        i = rng.randrange(len(cache.components))
        if kind in ("lru_membership", "tombstone") and i == 0:
            i = len(cache.components) - 1
        if kind in ("lru_membership", "tombstone") and i == 0:
            pytest.skip("Full keeps no LRU list and has no tombstones")
        node = pick(cache, rng, lambda n: applies(n, i))
        corrupt(cache, node, i)
        same_report(cache, [node.id])


def drift_evictable(cache, i):
    cache.tree.evictable[i] += 1


def drift_protected(cache, i):
    cache.tree.protected[i] -= 1


def move_evictable_to_protected(cache, i):  # the sum stays right
    cache.tree.evictable[i] -= 1
    cache.tree.protected[i] += 1


def leak_a_page(cache, i):  # taken from the pool, held by nobody
    allocator = cache.kv_pool if i == 0 else cache.components[i].pool.allocator
    allocator.alloc(1)


GLOBAL_CORRUPTIONS = {f.__name__: f for f in (drift_evictable, drift_protected, move_evictable_to_protected, leak_a_page)}


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("kind", GLOBAL_CORRUPTIONS)
def test_a_global_corruption_is_named_without_any_id(config, kind):
    for i in range(len(CONFIGS[config]["components"])):
        cache = grow(config, 10 + i)
        GLOBAL_CORRUPTIONS[kind](cache, i)
        same_report(cache, ())


# ---- clean trees ----------------------------------------------------------------------


@pytest.mark.parametrize("config", CONFIGS)
def test_clean_trees_pass_both_ways_and_the_probes_pass(config):
    for seed in range(3):
        cache = grow(config, 100 + seed, requests=80)
        everything = list(cache.tree.nodes)
        assert check_invariants(cache) == []
        assert check_invariants(cache, touched=everything) == []
        assert probe(cache, everything), "a clean tree must pass the probes, not fall back to the sweep"


@pytest.mark.parametrize("config", CONFIGS)
def test_every_step_of_a_random_run_passes_its_probes(config):
    """What a step touched (take_touched) passes the probes after every op of a run
    with matches, locks, evictions and request flows."""
    rng = random.Random(7)
    cache = grow(config, 7, requests=5)
    cache.tree.take_touched()
    held = []
    for _ in range(80):
        op = rng.random()
        key = [rng.randrange(30) for _ in range(rng.randint(1, 16))]
        if op < 0.4:
            cache.release_kv_cache(cache.new_request(key))
        elif op < 0.6:
            held.append(cache.new_request(key))
        elif op < 0.75 and held:
            cache.release_kv_cache(held.pop(rng.randrange(len(held))))
        elif op < 0.9:
            cache.match_prefix(key)
        else:
            cache.evict(EvictParams(num_tokens=rng.randint(1, 30)))
        touched = cache.tree.take_touched()
        assert probe(cache, touched), f"probes failed after op {op:.2f} on a clean cache"
        assert check_invariants(cache) == []


# ---- the per-step mode is local --------------------------------------------------------


def test_ids_no_longer_in_the_tree_are_skipped(small):
    assert check_invariants(small.cache, touched=[10**9, None, small.cache.tree.root.id]) == []


def test_a_corruption_away_from_every_touched_node_is_left_to_the_sweep():
    cache = grow("full-ps1", 20)
    tree = cache.tree
    x = pick(cache, random.Random(1), lambda n: not n.children and n.parent is not tree.root and n.data[0].lock_ref == 0)
    others = [n for n in tree.nodes.values() if n.parent is tree.root and n is not x.parent and not _above(n, x)]
    x.data[0].lock_ref += 1
    assert check_invariants(cache) and check_invariants(cache, touched=[others[0].id]) == []
    assert check_invariants(cache, touched=[x.id])


def _above(node, other) -> bool:
    while other is not None:
        if other is node:
            return True
        other = other.parent
    return False


def test_take_touched_reports_what_a_split_an_eviction_and_a_lock_changed():
    checked = Checked(page_size=1, kv_size=64)
    tree = checked.cache.tree
    assert tree.take_touched() == set()  # the first call starts recording
    checked.insert([1, 2, 3, 4])
    leaf = max(tree.nodes)
    assert tree.take_touched() >= {leaf, tree.root.id}
    m = checked.match([1, 2, 9])  # splits [1 2 3 4] at 2
    upper = m.last_device_node
    assert tree.take_touched() >= {upper, leaf}
    receipt = checked.lock(upper)
    assert tree.take_touched() == {upper}  # the anchor: the checker walks its ancestors
    checked.unlock(upper, receipt)
    tree.take_touched()
    checked.evict(64)
    assert tree.take_touched() >= {leaf, upper, tree.root.id}  # deleted nodes and their parents


# ---- the batched fingerprints the checks rely on ---------------------------------------


def _path_tokens(node) -> list[int]:
    parts = []
    while node.parent is not None:
        parts.append(node.token_ids)
        node = node.parent
    return [t for part in reversed(parts) for t in part]


@pytest.mark.parametrize("config", ["swa-ps1", "hybrid-ps4"])
def test_batched_path_fingerprints_match_one_prefix_at_a_time(config):
    """Any mix of nodes (repeats, the root, parents before or after their children, a
    subset as targets) gets what ``prefix_fingerprints(path)[-1]`` gives, None for an
    empty path."""
    from cache.pools.kv_buffer import node_path_fingerprints, prefix_fingerprints

    cache = grow(config, 5)
    tree = cache.tree
    nodes = [n for n in tree.nodes.values() if n is not tree.root]

    def expected(node):
        tokens = _path_tokens(node)
        return int(prefix_fingerprints(tokens)[-1]) if tokens else None

    assert node_path_fingerprints(nodes) == [expected(n) for n in nodes]
    rng = random.Random(5)
    for _ in range(100):
        batch = rng.sample(nodes, rng.randint(1, 6)) + [tree.root] * rng.randint(0, 2)
        batch = [n.parent for n in batch if n.parent is not None] + batch
        rng.shuffle(batch)
        targets = rng.sample(batch, rng.randint(1, len(batch))) if rng.random() < 0.5 else None
        got = node_path_fingerprints(batch, targets=targets)
        assert got == [expected(n) for n in (batch if targets is None else targets)]
