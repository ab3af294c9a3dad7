"""The request-flow faults of the catalogue (cache/faults/requests.py): each one, turned
on in the bug scenario that shows the correct behaviour, fires and is caught.

Measured (first step the fault fired / first failing step / what names it there):

  retract-pads-unaligned-prefix  fired 4 (retract after the checkpoint at 6 on page 4),
                                 flagged 4: pool.full.balance; expectation full_available
  abort-retracted-keeps-backup   fired 6 (abort of the retracted r1), flagged 6:
                                 host.pool_balance; expectation full_host_available
  stop-tail-freed-from-the-stop  fired 3 (release with the stop mid-page), flagged 3:
                                 the release refused as a double free, pool.full.balance
  abort-chunked-not-released     fired 4 (abort of r1 in chunked prefill), flagged 4:
                                 pool.full.balance; expectation full_protected
"""

from __future__ import annotations

from fault_util import BugCase as Case, assert_imports_no_torch, bug_case_tests, cited_fault


CASES = [
    Case("retract-pads-unaligned-prefix", "sgl-project/sglang#4977", "sglang-4977-retract-pads-unaligned-prefix", 4,
         "pool.full.balance", "full_available"),
    Case("abort-retracted-keeps-backup", "sgl-project/sglang#18701", "sglang-18701-abort-retracted-keeps-backup", 6,
         "host.pool_balance", "full_host_available"),
    Case("stop-tail-freed-from-the-stop", "sgl-project/sglang#38941", "sglang-38941-stop-tail-double-free", 3,
         "pool.full.balance", "error"),
    Case("abort-chunked-not-released", "sgl-project/sglang-jax#984", "sglang-jax-984-abort-chunked-leak", 4,
         "pool.full.balance", "full_protected"),
]


def test_catalogue_entries_cite_their_source_and_the_scenario_says_it_too():
    for case in CASES:
        assert cited_fault(case).components == ("full",)


def test_the_requests_faults_module_imports_no_torch():
    assert_imports_no_torch("cache.faults.requests")


# each case: its scenario passes without the fault; with it, the fault is caught where it fires
test_scenario_passes_without_the_fault, test_fault_fires_and_is_caught_where_it_fires = bug_case_tests(CASES)
