"""SGLang's KV events (cache/observe/kv_events.py): what each tree-core site records, how the
queue coalesces, and the router's replay of the stream checked against the cache
(workbench/model/timeline/kv_router.py), on every shipped scenario and under a fault."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from cache import CacheConfig, UnifiedRadixCache
from cache.faults import catalogue
from cache.faults.kv_events import FAULTS, UNEVICT_NO_GPU_STORE
from cache.observe.kv_events import CPU, GPU, AllBlocksCleared, BlockRemoved, BlockStored
from cache.basics.page_hash import as_int64
from urc_util import urc
from workbench.model.scenarios.scenario import load_scenario, scenario_from_records
from workbench.model.timeline.kv_router import ROUTER_VIEW, UNKNOWN_BLOCK, RouterView
from workbench.model.timeline.runner import Runner
from workbench.model.timeline.driver import CacheDriver

ROOT = Path(__file__).resolve().parents[2]
KV_FAULTS = {f.name for f in FAULTS}
HOST = {"write_policy": "write_through", "load_back_threshold": 1}


def make(page_size: int = 4, **config) -> tuple[UnifiedRadixCache, CacheDriver]:
    cache = UnifiedRadixCache(CacheConfig.of(page_size=page_size, kv_size=64, device="cpu",
                                             enable_kv_cache_events=True, **config))
    assert cache.tree.kv_events.take() == [AllBlocksCleared()]  # built on: SGLang's construction reset
    return cache, CacheDriver(cache)


def run(driver: CacheDriver, op: str, **fields) -> list:
    driver.run(op, fields)
    return driver.cache.tree.kv_events.take()


def blocks(cache, tokens_first: int) -> list[int]:
    node = next(n for n in cache.tree.nodes.values() if n.length and n.token_ids[0] == tokens_first)
    return [as_int64(h) for h in node.page_hashes]


def test_a_new_leaf_is_stored_on_the_gpu_page_by_page_coalesced_into_one_event():
    cache, s = make()
    [stored] = run(s, "insert", key=list(range(1, 9)))
    assert stored == BlockStored(blocks(cache, 1), None, list(range(1, 9)), 4, medium=GPU)
    [child] = run(s, "insert", key=list(range(1, 9)) + [20, 21, 22, 23])
    assert child.parent_block_hash == stored.block_hashes[-1] and child.token_ids == [20, 21, 22, 23]
    assert run(s, "insert", key=list(range(1, 9))) == []  # nothing new: nothing published


def test_a_split_publishes_nothing_and_the_halves_keep_their_blocks():
    cache, s = make()
    [whole] = run(s, "insert", key=list(range(1, 9)))
    [tail] = run(s, "insert", key=[1, 2, 3, 4, 30, 31, 32, 33])  # splits [1..8] at 4: only the new leaf
    assert tail.parent_block_hash == whole.block_hashes[0]
    assert blocks(cache, 1) + blocks(cache, 5) == whole.block_hashes


def test_coalescing_follows_sglang_enqueue():
    cache, s = make()
    recorder = cache.tree.kv_events
    run(s, "insert", key=[1, 2, 3, 4])
    run(s, "insert", key=[9, 9, 9, 9])
    a, b = (next(n for n in cache.tree.nodes.values() if n.length and n.token_ids[0] == t) for t in (1, 9))
    recorder.store(a)
    recorder.store(b)  # its parent is the root, not a's last block: a new event
    recorder.store(a, CPU)  # another medium: a new event
    recorder.remove(a)
    recorder.remove(b)  # removals on one medium merge whatever their nodes
    recorder.remove(a, CPU)
    events = recorder.take()
    assert [type(e).__name__ for e in events] == ["BlockStored"] * 3 + ["BlockRemoved"] * 2
    assert events[3] == BlockRemoved(blocks(cache, 1) + blocks(cache, 9), GPU)
    assert events[4] == BlockRemoved(blocks(cache, 1), CPU)
    assert recorder.take() == []


def test_the_host_tier_publishes_a_cpu_store_at_the_ack_and_each_move_between_tiers():
    cache, s = make(hicache=HOST)
    events = run(s, "insert", key=list(range(1, 9)))
    ids = blocks(cache, 1)
    assert [(type(e).__name__, e.medium, e.block_hashes) for e in events] == [
        ("BlockStored", GPU, ids), ("BlockStored", CPU, ids)]
    assert run(s, "evict", full=8) == [BlockRemoved(ids, GPU)]  # demoted: host-only
    [load] = run(s, "load_back", key=list(range(1, 9)))
    assert (load.medium, load.block_hashes) == (GPU, ids)
    run(s, "evict", full=8)
    [back] = run(s, "insert", key=list(range(1, 9)))  # an insert over the host-only node
    assert (back.medium, back.block_hashes) == (GPU, ids)
    run(s, "evict", full=8)
    assert run(s, "evict_host", full=8) == [BlockRemoved(ids, CPU)]


def test_held_transfers_publish_the_host_copies_at_the_flush_ancestors_first():
    cache, s = make(hicache={**HOST, "transfers": "held"})
    run(s, "insert", key=list(range(1, 9)))
    run(s, "flush")
    [gpu] = run(s, "insert", key=list(range(1, 9)) + [20, 21, 22, 23])
    assert gpu.medium == GPU
    assert run(s, "flush") == [BlockStored(blocks(cache, 20), blocks(cache, 1)[-1], [20, 21, 22, 23], 4, medium=CPU)]


def test_deleting_an_unbacked_leaf_removes_it_from_the_gpu():
    cache, s = make()
    run(s, "insert", key=list(range(1, 9)))
    ids = blocks(cache, 1)
    assert run(s, "evict", full=8) == [BlockRemoved(ids, GPU)]


@pytest.mark.parametrize("components,evict", [(["full", "swa"], {"swa": 1}), (["full", "mamba"], {"mamba": 1})])
def test_an_auxiliary_tombstone_publishes_nothing(components, evict):
    """An eviction that only tombstoned SWA or Mamba data (every node and its Full KV
    stayed) records nothing; one that took a leaf records its GPU removal."""
    extra = {"sliding_window": 2} if "swa" in components else {"mamba_size": 4}
    cache, s = make(1, components=components, **extra)
    for key in (list(range(1, 9)), list(range(1, 13)), list(range(1, 9)) + [50, 51, 52, 53]):
        run(s, "insert", key=key)  # [1..8] ends up internal, with its own state
    tombstones = 0
    for _ in range(8):
        before = {n.id for n in cache.tree.nodes.values() if n.data[0].value is not None}
        aux = sum(n.data[1].value is not None for n in cache.tree.nodes.values())
        events = run(s, "evict", **evict)
        after = {n.id for n in cache.tree.nodes.values() if n.data[0].value is not None}
        if after == before and aux != sum(n.data[1].value is not None for n in cache.tree.nodes.values()):
            tombstones += 1
            assert events == []
        elif after != before:
            assert events and all(isinstance(e, BlockRemoved) and e.medium == GPU for e in events)
    assert tombstones


def test_reset_clears_all_blocks():
    cache, s = make()
    run(s, "insert", key=list(range(1, 9)))
    cache.reset()
    assert cache.tree.kv_events.take() == [AllBlocksCleared()]


def test_events_are_off_by_default_and_turning_them_on_hashes_pages():
    cache = UnifiedRadixCache(CacheConfig.of(page_size=4, kv_size=64, device="cpu"))
    CacheDriver(cache).run("insert", {"key": list(range(1, 9))})
    assert not cache.tree.kv_events.enabled and cache.tree.kv_events.take() == []
    assert not cache.tree.page_hashing
    cache.tree.kv_events.enable()
    assert cache.tree.page_hashing and len(blocks(cache, 1)) == 2


# ---- the router's view ---------------------------------------------------------------------


def test_the_router_view_names_a_removal_it_never_saw_stored_and_a_missing_block():
    cache, s = make()
    view = RouterView()
    run(s, "insert", key=list(range(1, 9)))
    ids = blocks(cache, 1)
    [unknown] = view.apply([BlockRemoved([ids[0]], GPU)])
    assert unknown.name == UNKNOWN_BLOCK
    found = view.check(cache)
    assert [v.name for v in found] == [ROUTER_VIEW] and "missing GPU block(s)" in found[0].message
    assert f"node #{next(n.id for n in cache.tree.nodes.values() if n.length)}" in found[0].message
    view.apply([BlockStored(ids, None, list(range(1, 9)), 4, medium=GPU)])
    assert view.check(cache) == []
    view.apply([BlockStored([123], None, [1], 1, medium=CPU)])
    [extra] = view.check(cache)
    assert "extra CPU_PINNED block(s) [123]" in extra.message and "no node" in extra.message


def _shipped():
    return sorted(p for p in (ROOT / "scenarios").rglob("*.toml"))


@pytest.mark.parametrize("path", _shipped(), ids=lambda p: str(p.relative_to(ROOT / "scenarios")))
def test_the_router_view_holds_on_every_shipped_scenario(path):
    scenario = load_scenario(path)
    if KV_FAULTS & set(scenario.config.get("faults", ())):
        pytest.skip("a KV-event fault's repro: it drifts by design")
    out = io.StringIO()
    timeline = Runner(scenario, kv_events=out).run()
    drifts = [(r.index, v) for r in timeline.records for v in r.violations if v.name.startswith("kv_events")]
    assert drifts == []
    assert all(json.loads(line)["type"] in ("BlockStored", "BlockRemoved", "AllBlocksCleared")
               for line in out.getvalue().splitlines())


def test_the_fault_drifts_the_router_at_the_step_it_fires():
    fault = catalogue()[UNEVICT_NO_GPU_STORE]
    assert fault.source == "sgl-project/sglang#32537" and ("enable_kv_cache_events", True) in fault.options
    header = {"schema": 1, "scenario": {"name": "kv-drift"},
              "config": {"components": ["full"], "page_size": 4, "kv_size": 64, "hicache": HOST,
                         "enable_kv_cache_events": True, "faults": [UNEVICT_NO_GPU_STORE]}}
    steps = [{"op": "insert", "key": list(range(1, 9))}, {"op": "evict", "full": 8},
             {"op": "insert", "key": list(range(1, 9))}]
    records = Runner(scenario_from_records(header, steps)).run().records
    assert [r.faults_fired for r in records] == [(), (), (UNEVICT_NO_GPU_STORE,)]
    assert [v.name for v in records[2].violations] == [ROUTER_VIEW]
    assert "missing GPU block(s)" in records[2].violations[0].message
    assert records[0].passed and records[1].passed


def test_a_stale_page_hash_is_an_invariant_violation():
    from cache import check_invariants

    cache, s = make()
    run(s, "insert", key=list(range(1, 9)))
    node = next(n for n in cache.tree.nodes.values() if n.length)
    assert check_invariants(cache) == []
    node.page_hashes = node.page_hashes[:1]
    assert [v.name for v in check_invariants(cache, touched=[node.id])] == ["page_hash.chain"]


# ---- urc run --kv-events -----------------------------------------------------------------------


def test_urc_run_writes_the_stream_and_never_overwrites_without_force(capsys, tmp_path):
    out = tmp_path / "kv.jsonl"
    scenario = str(ROOT / "scenarios" / "tour_hicache.toml")
    rc, _, err = urc(capsys, "run", scenario, "--kv-events", str(out))
    assert rc == 0, err
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0]["step"] == 1 and lines[0]["op"] == "insert" and lines[0]["type"] == "BlockStored"
    assert {line["medium"] for line in lines if "medium" in line} == {GPU, CPU}
    before = out.read_text()
    rc, _, err = urc(capsys, "run", scenario, "--kv-events", str(out))
    assert rc == 2 and "exists" in err and len(err.strip().splitlines()) == 1
    assert out.read_text() == before
    rc, _, err = urc(capsys, "run", scenario, "--kv-events", str(out), "--force")
    assert rc == 0 and out.read_text() == before


def test_each_step_keeps_its_kv_events_in_words_for_the_views(tmp_path, capsys):
    """The prefetch's host-only node reaches the router as one coalesced CPU store; the
    step panel and ``urc show`` print what the step published."""
    from urc_util import urc
    from workbench.model.timeline.runner import run_scenario

    text = (ROOT / "scenarios" / "tour_storage.toml").read_text().replace(
        "kv_size = 32", "kv_size = 32\nenable_kv_cache_events = true")
    path = tmp_path / "tour_events.toml"
    path.write_text(text)
    timeline = run_scenario(path)
    assert timeline.passed
    flush = timeline.records[9]  # the flush that completes prefetch p2
    assert flush.kv_events == ("BlockStored CPU_PINNED 4 blocks cf97ad…, 4ebfa8…, eddb4a…, …",)
    rc, out, _ = urc(capsys, "show", str(path), "--step", "10")
    assert rc == 0 and "kv event: BlockStored CPU_PINNED 4 blocks cf97ad" in out
