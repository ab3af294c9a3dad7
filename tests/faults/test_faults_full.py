"""The Full / tree-core faults of the catalogue (cache/faults/full.py): each one, turned
on in the bug scenario that shows the correct behaviour, fires and is caught.

What each scenario catches, measured (first step the fault fired / first failing step /
the checks that name it there):

  lock-skips-matched-node   fired 6 (lock), flagged 6: lock.unaccounted, leaf_set;
                            expectations full_lock_ref, full_protected, full_evictable
  split-evictable-drift     fired 2 (insert: a leaf gains a child), flagged 2:
                            counter.evictable; expectation full_evictable
  evictable-double-count    fired 8 (r3 finishes, P still locked by r2), flagged 8:
                            counter.evictable, counter.protected; expectations
                            full_evictable, full_protected (idle step 10: 44 + 48 > 64)
  release-detached-lock     fired 9 (second unlock), flagged 9: lock.negative,
                            lock.unaccounted; the "state unchanged by the failed op"
                            check (the refusal message still says "not held")
  partial-page-empty-node   fired 2 (match [1 2 3] on page 4), flagged 2:
                            key.page_aligned, tree.child_key; expectations nodes,
                            mamba_tombstones
  ghost-empty-node          fired 3 (r1 finishes with cache_len 0), flagged 3:
                            counter.protected, lru.vs_tree, pool.mamba.balance;
                            expectations mamba_available, mamba_protected
"""

from __future__ import annotations

import dataclasses

import pytest

from cache import UnifiedRadixCache
from cache.components.full.component import FullComponent
from cache.controller.unified_radix_cache import UnifiedRadixCache as ControllerClass
from cache.faults import catalogue
from cache.tree.core import UnifiedTreeCore
from fault_util import BUGS, assert_imports_no_torch, assert_passes_without_faults, run_with_fault
from urc_util import urc
from workbench.model.timeline.runner import Runner
from workbench.model.scenarios.scenario import load_scenario
from workbench.model.scenarios.writer import scenario_toml



@dataclasses.dataclass(frozen=True)
class Case:
    fault: str
    source: str
    components: tuple[str, ...]
    scenario: str
    first_fired: int
    first_flagged: int
    violations: frozenset[str]  # invariants named at the first flagged step (at least these)
    fields: frozenset[str]  # failed expectation fields there


CASES = [
    Case("lock-skips-matched-node", "sgl-project/mini-sglang#52", ("full",),
         "mini-sglang-52-lock-skips-matched-node", 6, 6,
         frozenset({"lock.unaccounted", "leaf_set"}), frozenset({"full_lock_ref", "full_protected", "full_evictable"})),
    Case("split-evictable-drift", "UbiquitousLearning/mllm#656", ("full",),
         "mllm-656-split-node-evictable", 2, 2,
         frozenset({"counter.evictable"}), frozenset({"full_evictable"})),
    Case("evictable-double-count", "sgl-project/sglang#35270", ("full",),
         "sglang-35270-evictable-double-count", 8, 8,
         frozenset({"counter.evictable", "counter.protected"}), frozenset({"full_evictable", "full_protected"})),
    Case("release-detached-lock", "sgl-project/sglang#29291", ("full",),
         "sglang-29291-release-detached-lock", 9, 9,
         frozenset({"lock.negative", "lock.unaccounted"}), frozenset({"state"})),
    Case("partial-page-empty-node", "sgl-project/sglang#28692", ("mamba",),
         "sglang-28692-partial-page-empty-node", 2, 2,
         frozenset({"key.page_aligned", "tree.child_key"}), frozenset({"nodes", "mamba_tombstones"})),
    Case("ghost-empty-node", "sgl-project/sglang#35821", ("mamba",),
         "sglang-35821-empty-cache-len-ghost-node", 3, 3,
         frozenset({"counter.protected", "lru.vs_tree", "pool.mamba.balance"}),
         frozenset({"mamba_available", "mamba_protected"})),
]
IDS = [c.fault for c in CASES]


def scenario_of(case: Case, faults=None):
    scenario = load_scenario(BUGS / f"{case.scenario}.toml")
    if faults is None:
        return scenario
    return dataclasses.replace(scenario, config={**scenario.config, "faults": list(faults)})


def first(records, predicate):
    return next((r.index for r in records if predicate(r)), None)


def test_catalogue_entries():
    known = catalogue()
    for case in CASES:
        fault = known[case.fault]
        assert fault.name == case.fault
        assert fault.source == case.source
        assert fault.components == case.components
        assert fault.summary and callable(fault.install)


def test_full_faults_module_imports_no_torch():
    assert_imports_no_torch("cache.faults.full")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_scenario_passes_without_the_fault(case):
    assert_passes_without_faults(scenario_of(case))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_fault_fires_and_is_caught(case):
    timeline, fired_at = run_with_fault(case.scenario, case.fault)
    fired = fired_at[0] if fired_at else None
    flagged = first(timeline.records, lambda r: not r.passed)
    assert fired is not None, "the fault never fired"
    assert flagged >= fired, "flagged before the fault changed anything"
    assert (fired, flagged) == (case.first_fired, case.first_flagged)
    record = timeline.records[flagged - 1]
    assert record.faults_fired == (case.fault,)
    assert case.violations <= {v.name for v in record.violations}
    assert case.fields <= {f.field for f in record.failures}
    # only this fault is ever reported, and only where it fired
    for r in timeline.records:
        assert set(r.faults_fired) <= {case.fault}


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_urc_run_reports_the_fault(case, capsys, tmp_path):
    path = tmp_path / f"{case.fault}.toml"
    path.write_text(scenario_toml(scenario_of(case, [case.fault])), encoding="utf-8")
    rc, out, err = urc(capsys, "run", str(path))
    assert rc == 1, (out, err)
    assert "FAIL" in out and "Traceback" not in out + err
    assert f"step {case.first_flagged} " in out
    clean = tmp_path / f"{case.fault}-clean.toml"
    clean.write_text(scenario_toml(scenario_of(case)), encoding="utf-8")
    rc, out, err = urc(capsys, "run", str(clean))
    assert rc == 0, (out, err)


PATCHED = {  # (what the installer replaces on the instance)
    "lock-skips-matched-node": [("full", "acquire_lock"), ("full", "release_lock")],
    "split-evictable-drift": [("tree", "_add_leaf")],
    "evictable-double-count": [("full", "release_lock")],
    "release-detached-lock": [("locks", "inc_lock_ref"), ("locks", "dec_lock_ref")],
    "partial-page-empty-node": [("tree", "match_prefix")],
    "ghost-empty-node": [("cache", "_checkpoint")],
}


def _owner(cache, where):
    return {"full": cache.by_name["full"], "tree": cache.tree, "locks": cache.tree.locks, "cache": cache}[where]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_fault_touches_only_its_instance(case):
    faulty = Runner(scenario_of(case, [case.fault]))
    for where, name in PATCHED[case.fault]:
        assert name in vars(_owner(faulty.cache, where)), f"{where}.{name} not patched on the instance"
    assert not faulty.run().passed
    # the classes are untouched, and a cache built afterwards runs the correct code
    assert "acquire_lock" in vars(FullComponent) and "release_lock" in vars(FullComponent)
    for cls, names in ((UnifiedTreeCore, ("_add_leaf", "match_prefix")), (ControllerClass, ("_checkpoint",))):
        for name in names:  # still the function its defining class (or mixin) wrote
            owner = next(k for k in cls.__mro__ if name in vars(k))
            assert getattr(cls, name).__qualname__ == f"{owner.__name__}.{name}", name
    clean = Runner(scenario_of(case))
    for where, name in PATCHED[case.fault]:
        assert name not in vars(_owner(clean.cache, where))
    assert clean.cache.fault_hits == {}
    timeline = clean.run()
    assert timeline.passed and not any(r.faults_fired for r in timeline.records)
    assert isinstance(clean.cache, UnifiedRadixCache)


def test_faults_stay_quiet_where_behaviour_coincides():
    """A lock and release on the root, a release of a lock never taken on the root,
    and a page-aligned key: the faulty copies behave like the correct code there and
    must not report a hit."""
    from cache import MatchPrefixParams, RadixKey
    from cache.basics.errors import LockError

    cache = UnifiedRadixCache(components=("full",), page_size=1, kv_size=16, device="cpu",
                              faults=("lock-skips-matched-node", "release-detached-lock"))
    root = cache.tree.root.id
    receipt = cache.inc_lock_ref(root)
    cache.dec_lock_ref(root, receipt)
    with pytest.raises(LockError, match="not held"):
        cache.dec_lock_ref(root, receipt)
    assert cache.fault_hits == {"lock-skips-matched-node": 0, "release-detached-lock": 0}

    mamba = UnifiedRadixCache(components=("full", "mamba"), page_size=4, kv_size=32, mamba_size=4, device="cpu",
                              faults=("partial-page-empty-node",))
    mamba.match_prefix(MatchPrefixParams(RadixKey([1, 2, 3, 4])))
    mamba.match_prefix(MatchPrefixParams(RadixKey([1, 2, 3])))  # empty tree: no child to split
    assert mamba.fault_hits == {"partial-page-empty-node": 0}
