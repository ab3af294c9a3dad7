"""The storage-tier faults of the catalogue (cache/faults/storage.py, and the prefetch's
KV-event fault in cache/faults/kv_events.py): each one, turned on in the bug scenario
that shows the correct behaviour, fires and is caught at the step it fires.

Measured (step the fault fired and was flagged / what names it there):

  prefetch-poll-drops-unfinished          5 (the wait_complete poll): storage.prefetch
  prefetch-anchor-not-backed-up           5 (the prefetch): expectation issued
  prefetch-refill-under-unbacked-parent   6 (the prefetch): host.backup_chain; expectation issued
  prefetch-refill-publishes-no-cpu-store  4 (the prefetch): kv_events.router_view
  prefetch-past-the-prefix-limit          5 (the prefetch): expectation prefetch_tokens (then prefetched,
                                          and the request's match: host_hit_length 0 where 12)
"""

from __future__ import annotations

import pytest

from cache import UnifiedRadixCache
from cache.config.cache_config import CacheConfig
from cache.faults import catalogue
from fault_util import BugCase as Case, assert_imports_no_torch, bug_case_tests, cited_fault
from workbench.model.fuzzing.sweep import STORAGE_CONFIGS, configs_for


CASES = [
    Case("prefetch-poll-drops-unfinished", "sgl-project/sglang#9927", "sglang-9927-prefetch-poll-drops-unfinished", 5,
         "storage.prefetch", ""),
    Case("prefetch-anchor-not-backed-up", "sgl-project/sglang#9601", "sglang-9601-prefetch-anchor-not-backed-up", 5,
         "", "issued"),
    Case("prefetch-refill-under-unbacked-parent", "sgl-project/sglang#31902",
         "sglang-31902-prefetch-refill-under-unbacked-parent", 6, "host.backup_chain", "issued"),
    Case("prefetch-refill-publishes-no-cpu-store", "sgl-project/sglang#38486",
         "sglang-38486-prefetch-refill-publishes-no-cpu-store", 4, "kv_events.router_view", ""),
    Case("prefetch-past-the-prefix-limit", "sgl-project/sglang#27291", "sglang-27291-prefetch-past-the-prefix-limit", 5,
         "", "prefetch_tokens"),
]


def test_catalogue_entries_cite_their_source_and_name_a_stop_policy():
    for case in CASES:
        assert cited_fault(case).storage in ("best_effort", "wait_complete", "timeout")


def test_a_storage_fault_is_searched_on_the_storage_configs_under_its_policy():
    fault = catalogue()["prefetch-poll-drops-unfinished"]
    configs = configs_for(fault.components, fault.sessions, fault.options, fault.storage)
    assert len(configs) == len(STORAGE_CONFIGS) and all(c.storage == "wait_complete" and c.hicache for c in configs)
    delayed = [c for c in configs if c.delayed]
    assert delayed and delayed[0].scenario_config()["hicache"]["storage"]["inject"][0]["call"] == "exists"
    assert "delayed" in delayed[0].label() and "storage wait_complete" in delayed[0].label()


def test_a_storage_fault_needs_the_storage_tier():
    with pytest.raises(ValueError, match="storage tier"):
        UnifiedRadixCache(CacheConfig(components=("full",), kv_size=16, hicache={"write_policy": "write_through"},
                                      faults=("prefetch-poll-drops-unfinished",)))


def test_the_storage_faults_module_imports_no_torch():
    assert_imports_no_torch("cache.faults.storage")


# each case: its scenario passes without the fault; with it, the fault is caught where it fires
test_scenario_passes_without_the_fault, test_fault_fires_and_is_caught_where_it_fires = bug_case_tests(CASES)
