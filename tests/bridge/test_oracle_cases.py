"""Literal answers of the real SGLang 0.5.23 cache, replayed against ours.

``tools/oracle_cases/NAME.out.jsonl`` holds what ``sglang==0.5.23`` answered for
``NAME.jsonl`` (generated once with ../shared/oracle; see the README there). CI needs
only these saved files. Every comparable field must agree — prefix lengths, node
depths, eviction counts, lock deltas, tree shape, locks, hit counts, evictable leaves —
except ``available`` while a request holds a part-used page (our allocator is
page-granular, the oracle's token-granular), which the harness checks is exactly that
slack.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))

from oracle_diff import replay  # noqa: E402
from oracle_adapter import read_jsonl, read_ops  # noqa: E402

CASES = sorted(p for p in (TOOLS / "oracle_cases").glob("*.jsonl") if not p.name.endswith(".out.jsonl"))


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.stem)
def test_matches_sglang_0_5_23(case: Path):
    expected = read_jsonl(case.with_name(case.stem + ".out.jsonl"))
    report = replay(read_ops(case), expected)
    assert "fatal" not in report, report.get("fatal")
    assert report["compared"] >= len(report["skipped"]), "most ops must be comparable"
    wrong = [str(d) for d in report["diffs"] if d.kind != "page"]  # hard and soft both fail
    assert not wrong, "\n".join(wrong[:10])
    for diff in report["diffs"]:  # page-granularity differences must be explained
        assert diff.field.startswith("available") and "explained" in str(diff), str(diff)


def test_cases_present():
    assert len(CASES) >= 8
