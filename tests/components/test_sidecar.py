"""The sidecar component (cache/components/sidecar/component.py): entries per whole stride, its
match validator, split, locks, eviction rank and cascade, capacity eviction, config
fields and invariants; and a component added at run time with the registry alone."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cache import (
    CacheConfig,
    Cause,
    EventKind,
    EvictParams,
    InsertParams,
    RadixKey,
    UnifiedRadixCache,
    check_invariants,
    verify_match,
)
from cache.components import COMPONENT_REGISTRY
from cache.components.base import TreeComponent
from cache.pools.kv_buffer import prefix_fingerprints
from conftest import Checked

ROOT = Path(__file__).resolve().parents[2]
A = list(range(1, 11))  # 10 tokens: strides end at 4 and 8


def sidecar_cache(*components: str, stride: int = 4, size: int = 16, **config) -> Checked:
    config.setdefault("kv_size", 128)
    if "swa" in components:
        config.setdefault("sliding_window", 16)
    if "mamba" in components:
        config.setdefault("mamba_size", 16)
    return Checked(components=("full", *components), sidecar_stride=stride, sidecar_size=size, **config)


def put(checked: Checked, tokens: list[int]):
    """Insert as a direct caller would (a Mamba state with it when there is Mamba)."""
    cache = checked.cache
    state = cache.alloc_mamba_state(tokens) if "mamba" in cache.by_name else None
    result = checked.insert(tokens, mamba_value=state) if state is not None else checked.insert(tokens)
    if state is not None and result.mamba_exist:
        cache.free_mamba_state(state)
    return result


def entries(checked: Checked) -> dict[tuple[int, ...], int]:
    """Node path -> entries it holds (0: none)."""
    return {n.path: n.components["sidecar"].value_len or 0 for n in checked.cache.snapshot().non_root()}


def side(checked: Checked):
    return checked.cache.by_name["sidecar"]


# ---- placement, validator, split --------------------------------------------------------


@pytest.mark.parametrize("components", [("sidecar",), ("swa", "sidecar")], ids=["full+sidecar", "full+swa+sidecar"])
def test_a_node_holds_the_entries_of_the_strides_ending_in_it(components):
    c = sidecar_cache(*components)
    put(c, A)
    assert entries(c) == {tuple(A): 2}
    node = c.cache.tree.nodes[1]
    fps = prefix_fingerprints(A)
    assert side(c).pool.fingerprint[node.data[side(c).index].value].tolist() == [int(fps[3]), int(fps[7])]
    assert c.cache.available_size("sidecar") == 14 and c.cache.evictable_size("sidecar") == 2


@pytest.mark.parametrize("components", [("sidecar",), ("swa", "sidecar")], ids=["full+sidecar", "full+swa+sidecar"])
def test_a_match_ends_only_on_a_held_stride_boundary(components):
    c = sidecar_cache(*components)
    put(c, A)
    assert c.match(A).prefix_len == 0  # 10 tokens is not a whole number of strides
    assert c.match(A[:8]).prefix_len == 8  # splits at 8: the upper node takes both entries
    assert entries(c) == {tuple(A[:8]): 2, tuple(A): 0}
    assert c.match(A[:6] + [99]).prefix_len == 0  # splits at 6: no stride ends there
    assert c.match(A[:4]).prefix_len == 4  # splits at 4: one entry each side
    assert entries(c) == {tuple(A[:4]): 1, tuple(A[:6]): 0, tuple(A[:8]): 1, tuple(A): 0}
    assert c.cache.snapshot().lru["sidecar"][0] == c.cache.snapshot().nodes[1].id  # the match end first


def test_the_validator_and_the_verdict_agree():
    c = sidecar_cache("sidecar")
    c.cache.events.enabled = True
    seen = []
    c.cache.events.subscribe(seen.append)
    put(c, A)
    c.match(A)
    verdict = [e for e in seen if e.kind is EventKind.VERDICT and e.component == "sidecar"][-1]
    assert verdict.node == 0 and "not a whole number of strides (4)" in verdict.detail
    c.match(A[:8])
    verdict = [e for e in seen if e.kind is EventKind.VERDICT and e.component == "sidecar"][-1]
    assert verdict.tokens == 8 and "entry for the stride ending at token 8" in verdict.detail


def test_peek_match_agrees_with_match():
    c = sidecar_cache("sidecar")
    put(c, A)
    put(c, A[:4] + [50, 51, 52, 53])
    for key in (A, A[:8], A[:6], A[:4] + [50, 51, 52, 53], A[:4] + [50, 51]):
        peeked = sum(n for _, n in c.cache.tree.peek_match(RadixKey(key)))
        assert peeked == c.match(key).prefix_len, key


# ---- locks -------------------------------------------------------------------------------


def test_a_lock_pins_only_the_entries_of_its_node():
    c = sidecar_cache("sidecar")
    put(c, A[:8])
    put(c, A[:8] + [20, 21, 22, 23])
    m = c.match(A[:8] + [20, 21, 22, 23])
    receipt = c.cache.inc_lock_ref(m.last_device_node)
    assert c.cache.protected_size("sidecar") == 1 and c.cache.evictable_size("sidecar") == 2
    c.ok()
    result = c.cache.evict(EvictParams.of({"sidecar": 10}))
    assert result.by_component["sidecar"] == 2 and c.cache.protected_size("sidecar") == 1
    c.ok()
    c.cache.dec_lock_ref(m.last_device_node, receipt)
    assert c.cache.protected_size("sidecar") == 0 and c.cache.evictable_size("sidecar") == 1
    c.ok()


def test_splitting_a_locked_node_frees_the_entries_moved_up_to_eviction():
    c = sidecar_cache("sidecar")
    put(c, A[:8])
    m = c.match(A[:8])
    receipt = c.cache.inc_lock_ref(m.last_device_node)
    assert c.cache.protected_size("sidecar") == 2
    assert c.match(A[:4]).prefix_len == 4  # the upper half (unlocked for the sidecar) takes one entry
    assert c.cache.protected_size("sidecar") == 1 and c.cache.evictable_size("sidecar") == 1
    c.cache.dec_lock_ref(m.last_device_node, receipt)
    c.ok()


# ---- eviction rank, cascade, capacity ------------------------------------------------------


def test_the_sidecar_ranks_between_swa_and_mamba():
    c = sidecar_cache("swa", "sidecar", "mamba")
    swa, mamba, sc = (c.cache.by_name[n] for n in ("swa", "mamba", "sidecar"))
    full = c.cache.by_name["full"]
    assert full.eviction_priority(False) > swa.eviction_priority(False) > sc.eviction_priority(False) > mamba.eviction_priority(False)


def _events(cache) -> list:
    seen = []
    cache.events.enabled = True
    cache.events.subscribe(seen.append)
    return seen


def test_swa_tombstoning_a_node_cascades_its_entries():
    c = sidecar_cache("swa", "sidecar")
    put(c, A[:8])
    put(c, A[:8] + [20, 21, 22, 23])  # the upper node [1..8] is the oldest SWA holder
    seen = _events(c.cache)
    result = c.cache.evict(EvictParams(swa_num_tokens=8))
    assert result.swa_num_tokens_evicted == 8 and result.by_component["sidecar"] == 2
    cascade = [e for e in seen if e.kind is EventKind.CASCADE]
    assert [(e.component, e.tokens, e.cause, e.detail) for e in cascade] == [("sidecar", 2, Cause.CASCADE, "from swa")]
    c.ok()


def test_a_sidecar_tombstone_takes_mamba_along_but_not_swa():
    c = sidecar_cache("swa", "sidecar", "mamba")
    put(c, A[:8])
    put(c, A[:8] + [20, 21, 22, 23])
    c.match(A[:8] + [20, 21, 22, 23])  # the leaf is the most recent: [1..8] goes first
    seen = _events(c.cache)
    c.cache.evict(EvictParams.of({"sidecar": 1}))
    kinds = [(e.kind, e.component) for e in seen if e.kind in (EventKind.TOMBSTONE, EventKind.CASCADE)]
    assert kinds == [(EventKind.TOMBSTONE, "sidecar"), (EventKind.CASCADE, "mamba")]
    snap = c.cache.snapshot()
    upper = next(n for n in snap.non_root() if n.path == tuple(A[:8]))
    assert upper.components["swa"].value_len == 8 and upper.components["sidecar"].tombstone
    c.ok()


def test_an_insert_short_of_entries_evicts_the_oldest_unlocked_ones():
    c = sidecar_cache("sidecar", size=3)
    put(c, A[:8])
    put(c, [30, 31, 32, 33])
    seen = _events(c.cache)
    put(c, [40, 41, 42, 43, 44, 45, 46, 47])  # needs 2, 0 free: the oldest leaf [1..8] goes whole
    removed = [(e.kind, e.component, e.cause) for e in seen if e.kind in (EventKind.EVICT, EventKind.TOMBSTONE)]
    assert (EventKind.EVICT, "sidecar", Cause.CAPACITY) in removed and (EventKind.EVICT, "full", Cause.CASCADE) in removed
    assert entries(c) == {(30, 31, 32, 33): 1, (40, 41, 42, 43, 44, 45, 46, 47): 2}
    assert not c.cache.tree.live_receipts  # the lock that held the new path meanwhile is gone


def test_without_auto_evict_the_deeper_strides_go_without_entries():
    c = sidecar_cache("sidecar", size=3, auto_evict=False)
    put(c, A[:8])
    put(c, [40, 41, 42, 43, 44, 45, 46, 47])  # one entry left: its node needs two, so it gets none
    assert entries(c) == {tuple(A[:8]): 2, (40, 41, 42, 43, 44, 45, 46, 47): 0}
    assert c.match([40, 41, 42, 43, 44, 45, 46, 47]).prefix_len == 0


# ---- requests ----------------------------------------------------------------------------


def test_a_request_is_cached_up_to_whole_strides():
    c = sidecar_cache("sidecar")
    req = c.cache.new_request(A)
    c.cache.release_kv_cache(req)
    c.ok()
    assert entries(c) == {tuple(A[:8]): 2} and c.match(A).prefix_len == 8


def test_with_mamba_its_checkpoints_decide_the_cached_length():
    c = sidecar_cache("sidecar", "mamba")
    req = c.cache.new_request(A)
    c.cache.release_kv_cache(req)
    c.ok()
    assert entries(c) == {tuple(A): 2}  # Mamba's state is for all 10 tokens


# ---- config ------------------------------------------------------------------------------


def test_config_fields_are_the_components_own():
    cfg = CacheConfig.of(components=("full", "sidecar"), sidecar_size=8)
    assert cfg.extra == {"sidecar_size": 8}
    assert UnifiedRadixCache(cfg).by_name["sidecar"].stride == 128  # the declared default
    with pytest.raises(ValueError, match="sidecar_size .* is required"):
        UnifiedRadixCache(components=("full", "sidecar"), device="cpu")
    with pytest.raises(ValueError, match="sidecar_stride must be a positive int"):
        UnifiedRadixCache(components=("full", "sidecar"), sidecar_size=8, sidecar_stride=0, device="cpu")
    with pytest.raises(ValueError, match="unknown config field"):
        UnifiedRadixCache(components=("full", "sidecar"), sidecar_size=8, sidecar_strde=4, device="cpu")
    with pytest.raises(ValueError, match="unknown config field 'sidecar_size'"):
        CacheConfig.of(components=("full",), sidecar_size=8)  # no such component listed


# ---- invariants and match proofs ---------------------------------------------------------


def _names(cache, touched=None) -> set[str]:
    return {v.name for v in check_invariants(cache, touched=touched)}


def test_invariants_catch_a_broken_counter():
    c = sidecar_cache("sidecar")
    put(c, A)
    tree = c.cache.tree
    tree.take_touched()
    tree.evictable[side(c).index] += 1
    assert "counter.evictable" in _names(c.cache)
    assert _names(c.cache, touched=[1]) == _names(c.cache)  # the probe defers to the sweep


def test_invariants_catch_a_leak_a_misfiled_entry_and_a_wrong_count():
    c = sidecar_cache("sidecar")
    put(c, A)
    sc = side(c)
    sc.pool.alloc(1)  # taken, never attached
    assert "pool.sidecar.balance" in _names(c.cache)
    c = sidecar_cache("sidecar")
    put(c, A)
    value = c.cache.tree.nodes[1].data[side(c).index].value
    side(c).pool.write(value[:1], torch.tensor([12345]))
    assert "sidecar.entry_boundary" in _names(c.cache)
    bad = verify_match(c.cache, A[:4], c.cache.match_prefix(RadixKey(A[:4])))
    assert [v.name for v in bad] == ["match.sidecar_entry"]
    c = sidecar_cache("sidecar")
    put(c, A)
    node = c.cache.tree.nodes[1]
    node.data[side(c).index].value = node.data[side(c).index].value[:1]
    assert "sidecar.value_len" in _names(c.cache)


# ---- a fourth component needs only the registry -----------------------------------------


class TagComponent(TreeComponent):
    """A do-nothing component that only labels every node: proof that the registry is
    all a new component needs to reach the cache, the runner and the snapshot."""

    name = "tag"
    config_fields = {"tag_label": 7}

    def node_extras(self, node) -> dict:
        return {"label": self.config_value("tag_label")}


@pytest.fixture
def tag_registered():
    COMPONENT_REGISTRY.register("tag", TagComponent)
    yield
    COMPONENT_REGISTRY.unregister("tag")


def test_a_component_registered_at_run_time_runs_a_scenario_end_to_end(tag_registered):
    from workbench.model.timeline.runner import Runner
    from workbench.model.scenarios.scenario import scenario_from_records

    header = {"schema": 1, "scenario": {"name": "tagged"},
              "config": {"components": ["full", "tag"], "kv_size": 32, "tag_label": 3}}
    steps = [
        {"op": "insert", "key": [1, 2, 3, 4], "expect": {"prefix_len": 0, "nodes": 1, "tag_tombstones": 1}},
        {"op": "match", "key": [1, 2, 3, 4], "as": "m", "expect": {"prefix_len": 4}},
        {"op": "lock", "match": "m", "as": "l", "expect": {"tag_lock_ref": {"m": 0}, "full_lock_ref": {"m": 1}}},
        {"op": "unlock", "lock": "l"},
        {"op": "req_prefill", "req": "r", "tokens": [1, 2, 3, 4, 5, 6], "expect": {"prefix_len": 4}},
        {"op": "req_finish", "req": "r"},
        {"op": "evict", "full": 100, "expect": {"nodes": 0}},
    ]
    runner = Runner(scenario_from_records(header, steps), full_checks=True)
    timeline = runner.run()
    assert timeline.passed, [(r.index, r.error, r.failures, r.violations) for r in timeline.records if not r.passed]
    snapshot = runner.cache.snapshot()
    assert snapshot.components == ("full", "tag") and snapshot.pools.keys() == {"full"}
    runner.cache.insert(InsertParams(RadixKey([9, 9]), runner.cache.alloc_kv(2)))
    assert dict(runner.cache.snapshot().non_root()[0].components["tag"].extras) == {"label": 3}


def test_the_registry_refuses_a_name_twice_and_a_class_under_another_name():
    with pytest.raises(ValueError, match="already registered"):
        COMPONENT_REGISTRY.register("sidecar", TagComponent)
    with pytest.raises(ValueError, match="not 'other'"):
        COMPONENT_REGISTRY.register("other", TagComponent)
    with pytest.raises(ValueError, match="built-in"):
        COMPONENT_REGISTRY.unregister("sidecar")


def test_the_sidecar_tour_passes():
    from workbench.model.timeline.runner import run_scenario

    timeline = run_scenario(ROOT / "scenarios" / "tour_sidecar.toml")
    assert timeline.passed
    kinds = {(e.kind, e.component, e.cause) for r in timeline.records for e in r.events}
    assert (EventKind.CASCADE, "sidecar", Cause.CASCADE) in kinds
    assert (EventKind.EVICT, "sidecar", Cause.CAPACITY) in kinds


def test_a_scenario_evicts_sidecar_entries_by_name_and_expects_how_many_went():
    from workbench.model.scenarios.live import complete, parse_command
    from workbench.model.timeline.runner import Runner
    from workbench.model.scenarios.scenario import ScenarioError, StepAppender, scenario_from_records

    config = {"components": ["full", "sidecar"], "page_size": 1, "kv_size": 64, "sidecar_stride": 4, "sidecar_size": 8}
    header = {"schema": 1, "scenario": {"name": "evict-entries"}, "config": config}
    steps = [{"op": "insert", "key": list(range(1, 13)), "expect": {"sidecar_evictable": 3}},
             {"op": "insert", "key": [1, 2, 3, 4, 50, 51, 52, 53], "expect": {"sidecar_evictable": 4}},
             parse_command("evict sidecar=1 expect sidecar_evicted=1 full_evicted=0")]
    timeline = Runner(scenario_from_records(header, steps), full_checks=True).run()
    assert timeline.passed, [(r.index, r.error, r.failures) for r in timeline.records if not r.passed]
    assert timeline.records[-1].state.pools["sidecar"].evictable == 3
    assert "sidecar=" in complete("evict ", {}, ["full", "sidecar"])
    appender = StepAppender(scenario_from_records({**header, "config": {"components": ["full"], "kv_size": 64}}, []))
    with pytest.raises(ScenarioError, match="op 'evict' as written needs the sidecar component"):
        appender.append({"op": "evict", "sidecar": 1})
    with pytest.raises(ScenarioError, match="non-negative int"):
        StepAppender(scenario_from_records(header, [])).append({"op": "evict", "sidecar": -1})
