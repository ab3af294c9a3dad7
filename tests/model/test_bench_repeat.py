"""``urc bench --repeat``: a share of the seeded workload's requests repeats a recent one
whole, so matches hit past the shared prompts (on a hybrid, where without it every
match ends at the root)."""

from __future__ import annotations

import io
import json

import pytest

from workbench.model.scenarios.scenario import load_scenario
from workbench.model.scenarios.workload import RECENT, build_workload, write_trace
from workbench.model.timeline.runner import Runner

from urc_util import urc


def test_no_repeat_is_the_plain_workload():
    assert build_workload(40, seed=5, repeat=0.0) == build_workload(40, seed=5)


def test_a_repeated_request_is_a_recent_one_whole():
    requests = build_workload(400, seed=2, repeat=0.5)
    repeated = 0
    for i, key in enumerate(requests):
        if any(key == earlier for earlier in requests[max(0, i - RECENT):i]):
            repeated += 1
        else:  # a fresh request: its suffix was never seen before
            assert all(key != earlier for earlier in requests[:i])
    assert 0.4 * len(requests) < repeated < 0.6 * len(requests)


def _device_hits(repeat: float, tmp_path) -> int:
    path = tmp_path / f"hybrid-{repeat}.jsonl"
    with path.open("w", encoding="utf-8") as stream:
        write_trace(stream, 60, 1, ("full", "swa", "mamba"), repeat)
    runner = Runner(load_scenario(path))
    assert runner.run().passed  # every step checked
    return runner.cache.metrics.device_hit_tokens


def test_repeats_make_hybrid_matches_hit(tmp_path):
    assert _device_hits(0.0, tmp_path) == 0  # every match ends at the root
    assert _device_hits(0.5, tmp_path) > 0


def test_the_written_trace_names_its_repeats(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, _, err = urc(capsys, "bench", "--write-trace", "r.jsonl", "--requests", "9", "--repeat", "0.25")
    assert rc == 0 and "wrote 36 steps (9 requests)" in err
    header = json.loads(open("r.jsonl", encoding="utf-8").readline())
    assert header["scenario"]["name"] == "bench-full-9-repeat-0.25"
    plain = io.StringIO()
    write_trace(plain, 9, 0)
    assert json.loads(plain.getvalue().splitlines()[0])["scenario"]["name"] == "bench-full-9"


@pytest.mark.parametrize("argv, message", [
    (("--repeat", "1"), "--repeat must be a fraction from 0 to below 1"),
    (("--repeat", "-0.1"), "--repeat must be a fraction from 0 to below 1"),
    (("--repeat", "nan"), "--repeat must be a fraction from 0 to below 1"),
    (("--repeat", "0.3", "--store"), "--repeat shapes the seeded workload"),
    (("--repeat", "0.3", "--timeline"), "--repeat shapes the seeded workload"),
])
def test_bad_repeats_are_refused(capsys, argv, message):
    rc, _, err = urc(capsys, "bench", *argv)
    assert rc == 2 and message in err
