"""The sidecar in the host tier (cache/components/sidecar/host.py): the proof that a
component's host part is its own file plus its registry line. A Full+sidecar cache
backs entries up with their node, demotes them, matches on a host-only boundary,
loads them back, evicts them from the host, and its invariants see a host copy that
holds the wrong entries."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from conftest import Checked
from hicache_util import host_rows

from cache import EvictParams, RadixKey, check_invariants
from cache.config.cache_config import CacheConfig
from cache.tiers.hicache_config import host_components
from cache.pools.kv_buffer import prefix_fingerprints

ROOT = Path(__file__).resolve().parents[2]
A = list(range(1, 11))  # 10 tokens: strides (4) end at 4 and 8
B = [1, 2, 3, 4, 30, 31, 32, 33]


def make(*others: str, policy: str = "write_through", **host) -> Checked:
    extra = {"sliding_window": 16} if "swa" in others else {}
    extra.update({"mamba_size": 8} if "mamba" in others else {})
    return Checked(components=("full", *others, "sidecar"), kv_size=64, sidecar_stride=4, sidecar_size=16,
                   hicache={"write_policy": policy, "load_back_threshold": 1, **host}, **extra)


def node_at(c: Checked, tokens: list[int]):
    return next(n for n in c.cache.tree.nodes.values() if n.parent is not None and _path(n) == tokens)


def _path(node) -> list[int]:
    out = []
    while node.parent is not None:
        out[:0] = node.token_ids
        node = node.parent
    return out


def copies(c: Checked, node) -> tuple:
    """(device entries, host entries) of ``node``, None where there are none."""
    cd = node.data[c.cache.by_name["sidecar"].index]
    return tuple(None if v is None else int(v.shape[0]) for v in (cd.value, cd.host_value))


def rows(c: Checked) -> list[tuple]:
    return host_rows(c.cache, with_length=True)


def names(cache, touched=None) -> set[str]:
    return {v.name for v in check_invariants(cache, touched=touched)}


def test_backup_demotion_host_hit_load_back_and_host_eviction():
    c = make()
    sidecar, host = c.cache.by_name["sidecar"], c.cache.host
    assert host.aux["sidecar"].size == 33  # the default: twice the 16-entry pool plus one
    c.insert(A)  # write-through: the new leaf is backed up on its first hit, its two entries with it
    node = node_at(c, A)
    assert copies(c, node) == (2, 2) and c.cache.host_available_size("sidecar") == 31
    fps = prefix_fingerprints(A)
    assert host.aux["sidecar"].fingerprint[node.data[sidecar.index].host_value].tolist() == [int(fps[3]), int(fps[7])]
    r = c.cache.evict(EvictParams(num_tokens=10))  # demoted: device data gone, host copies kept
    assert r.by_component == {"full": 10, "sidecar": 2} and copies(c, node) == (None, 2)
    assert list(c.cache.tree.host_lru["sidecar"]) == [node] and c.cache.available_size("sidecar") == 16
    m = c.match(A[:8])  # splits the host-only node at 8: the upper part takes both host entries
    upper = node_at(c, A[:8])
    assert (m.prefix_len, m.host_hit_length, m.best_match_node) == (0, 8, upper.id)
    assert copies(c, upper) == (None, 2) and copies(c, node) == (None, None)
    assert list(c.cache.tree.host_lru["sidecar"]) == [upper]
    result = c.cache.load_back(RadixKey(A[:8]))
    assert (result.loaded, result.last_device_node) == (8, upper.id) and copies(c, upper) == (2, 2)
    assert c.match(A[:8]).prefix_len == 8  # verified: the loaded entries hold the right prefixes
    assert len(c.cache.tree.host_lru["sidecar"]) == 0 and c.cache.available_size("sidecar") == 14
    c.cache.evict(EvictParams(num_tokens=64))
    assert copies(c, upper) == (None, 2)
    assert c.cache.evict_host(1, "sidecar") == 2  # an internal host-only node: only its entries go
    assert copies(c, upper) == (None, None) and upper.id in c.cache.tree.nodes
    assert c.match(A[:8]).host_hit_length == 0  # no entry on either tier: no match end at 8
    c.cache.evict_host(100)
    assert len(c.cache.tree.nodes) == 1 and c.cache.host_available_size("sidecar") == 33
    assert check_invariants(c.cache) == []


def test_host_eviction_ranks_the_sidecar_between_swa_and_mamba():
    """Rows: (depth, length, first token, then device and host lengths of Full, SWA, sidecar)."""
    c = make("swa", host_swa_size=40)
    c.insert(A[:8])
    c.insert(B)
    c.cache.evict(EvictParams(num_tokens=64))  # every node demoted, each with its one entry
    assert rows(c) == [(4, 4, 1, None, 4, None, 4, None, 1), (8, 4, 5, None, 4, None, 4, None, 1),
                       (8, 4, 30, None, 4, None, 4, None, 1)]
    assert c.cache.evict_host(1, "sidecar") == 1  # its host LRU's oldest is a host leaf: it goes whole
    assert rows(c) == [(4, 4, 1, None, 4, None, 4, None, 1), (8, 4, 30, None, 4, None, 4, None, 1)]
    c.insert(A)
    c.cache.evict(EvictParams(swa_num_tokens=64))  # [1..4] loses its SWA, and its entry, ranked below SWA
    assert rows(c) == [(4, 4, 1, 4, 4, None, 4, None, 1), (8, 4, 30, None, 4, None, 4, None, 1),
                       (10, 6, 5, None, 6, None, 6, None, 1)]
    assert c.cache.evict_host(64, "swa") == 14  # host leaves whole; [1..4]'s SWA copy takes its entry's along
    assert rows(c) == [(4, 4, 1, 4, 4, None, None, None, None)]
    assert check_invariants(c.cache) == []


@pytest.mark.parametrize("policy", ["write_through", "write_back"])
def test_a_corrupted_host_copy_is_flagged(policy):
    c = make(policy=policy)
    c.insert(A)
    c.cache.evict(EvictParams(num_tokens=10))  # write-back backs it up here, before the demotion
    node = node_at(c, A)
    i, pool = c.cache.by_name["sidecar"].index, c.cache.host.aux["sidecar"]
    assert copies(c, node) == (None, 2) and check_invariants(c.cache) == []
    host = node.data[i].host_value
    pool.entries[host[1]] += 1  # the entry no longer holds its prefix's KV
    c.cache.tree.take_touched()
    assert "sidecar.host_entry" in names(c.cache)
    assert names(c.cache, touched=[node.id]) == names(c.cache)  # the probe sees it and defers to the sweep
    pool.entries[host[1]] -= 1
    pool.fingerprint[host[0]] = 12345  # filed under the wrong prefix
    assert "sidecar.host_entry" in names(c.cache)
    pool.fingerprint[host[0]] = int(prefix_fingerprints(A)[3])
    assert check_invariants(c.cache) == []
    node.data[i].host_value = host[:1]  # one entry short of its strides
    assert {"sidecar.host_value_len", "host.pool_balance"} <= names(c.cache)


def test_the_host_config_reads_the_sidecar_host_part():
    assert "sidecar" in host_components() and host_components(("full", "sidecar")) == ("full", "sidecar")
    config = CacheConfig.of(components=("full", "sidecar"), sidecar_size=16, hicache={"host_sidecar_size": 7})
    assert config.hicache.host_sizes == {"sidecar": 7}
    with pytest.raises(ValueError, match="host_sidecar_size needs the sidecar component"):
        CacheConfig(hicache={"host_sidecar_size": 7})
    with pytest.raises(ValueError, match="host_sidecar_size must be a positive int"):
        CacheConfig.of(components=("full", "sidecar"), sidecar_size=16, hicache={"host_sidecar_size": 0})


def test_nothing_in_the_cache_names_the_sidecar_but_its_own_folder_and_registry_line():
    """The host tier, like the device side, iterates over the components' parts: a
    component is its folder plus one registry line."""
    own = ROOT / "cache" / "components" / "sidecar"
    hits = []
    for path in (ROOT / "cache").rglob("*.py"):
        if own in path.parents:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search("sidecar", line, re.I):
                hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert len(hits) == 1 and hits[0].startswith("cache/components/__init__.py") and '"sidecar"' in hits[0], hits
