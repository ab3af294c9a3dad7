"""Exporting a timeline as a pytest file: the file passes on today's cache, fails
(naming the step and field) on a cache that behaves differently, and is never
written over a user's file."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from urc_util import full_header
from workbench.model.timeline.runner import run_scenario
from workbench.model.scenarios.scenario import ScenarioError
from workbench.model.debugging.regression_test import (departures, regression_test_name, regression_test_source,
                                                       write_regression_test)

ROOT = Path(__file__).resolve().parents[2]
EXPORTS = [  # (scenario, step to export at)
    ("scenarios/tour_swa.toml", 8),
    ("scenarios/tour_mamba.toml", 5),  # before its req_prefill, which the patch below would crash
    ("scenarios/bugs/sglang-24153-swa-unlock-after-split.toml", 13),
]

# A cache that behaves differently: every match that finds something returns one page less.
ONE_PAGE_LESS_PLUGIN = '''
from cache.controller.unified_radix_cache import UnifiedRadixCache

_match_prefix = UnifiedRadixCache.match_prefix


def match_prefix(self, params):
    result = _match_prefix(self, params)
    if result.prefix_len == 0:
        return result
    return result._replace(device_indices=result.device_indices[:result.prefix_len - self.page_size])


UnifiedRadixCache.match_prefix = match_prefix
'''


def run_pytest(files: list[Path], cwd: Path, plugin: str | None = None) -> subprocess.CompletedProcess:
    """The exported files under a fresh pytest, as a user would run them."""
    args = [sys.executable, "-m", "pytest", "-q", *map(str, files), "-p", "no:cacheprovider"]
    if plugin:
        args += ["-p", plugin]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(cwd), str(ROOT)]))
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def exported(path: str, upto: int, target: Path) -> Path:
    write_regression_test(run_scenario(ROOT / path), upto, target)
    return target


def run_in_process(source: str, tmp_path: Path) -> None:
    """Run the exported test function here (faster than a subprocess for the checks
    that are about content, not about pytest)."""
    namespace: dict = {}
    exec(compile(source, "exported_test.py", "exec"), namespace)
    names = [name for name in namespace if name.startswith("test_") and callable(namespace[name])]
    assert len(names) == 1
    namespace[names[0]](tmp_path)


def first_match_failure(path: str, upto: int) -> str:
    """The line the patched cache must produce: the first match that found something."""
    timeline = run_scenario(ROOT / path)
    page = timeline.scenario.config.get("page_size", 1)
    for record in timeline.records[:upto]:
        if record.step.op == "match" and record.result["prefix_len"] > 0:
            n = record.result["prefix_len"]
            return f"step {record.index} (match): prefix_len: expected {n}, got {n - page}"
    raise AssertionError(f"{path} has no match that finds anything in its first {upto} steps")


def test_exported_tests_pass_then_fail_on_a_different_cache(tmp_path):
    files = [exported(path, upto, tmp_path / f"test_export_{i}.py") for i, (path, upto) in enumerate(EXPORTS)]
    passed = run_pytest(files, tmp_path)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert f"{len(files)} passed" in passed.stdout

    (tmp_path / "one_page_less.py").write_text(ONE_PAGE_LESS_PLUGIN, encoding="utf-8")
    failed = run_pytest(files, tmp_path, plugin="one_page_less")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert f"{len(files)} failed" in failed.stdout
    for path, upto in EXPORTS:
        assert first_match_failure(path, upto) in failed.stdout


def test_a_changed_final_state_fails_naming_the_field(tmp_path):
    path = exported("scenarios/tour_swa.toml", 5, tmp_path / "test_tour_swa.py")
    source = path.read_text(encoding="utf-8")
    assert "'nodes': 4," in source
    path.write_text(source.replace("'nodes': 4,", "'nodes': 5,"), encoding="utf-8")
    failed = run_pytest([path], tmp_path)
    assert failed.returncode == 1
    assert "'nodes': 4" in failed.stdout and "'nodes': 5" in failed.stdout


def test_a_changed_tree_shape_fails(tmp_path):
    source = regression_test_source(run_scenario(ROOT / "scenarios/tour_swa.toml"), 5)
    row = "(2, 4, {'full': (4, 0), 'swa': (None, 0)}),"  # the SWA tombstone the evict left
    assert row in source
    with pytest.raises(AssertionError):
        run_in_process(source.replace(row, "(2, 4, {'full': (4, 0), 'swa': (4, 0)}),"), tmp_path)


def test_exported_source_passes_ruff_f_and_e9(tmp_path):
    ruff = shutil.which("ruff") or shutil.which("ruff", path=str(Path(sys.executable).parent))
    if ruff is None:
        pytest.skip("ruff is not installed")
    files = [exported(path, upto, tmp_path / f"test_export_{i}.py") for i, (path, upto) in enumerate(EXPORTS)]
    files.append(exported("scenarios/tour.toml", 0, tmp_path / "test_empty.py"))
    surprises = tmp_path / "surprises.toml"
    surprises.write_text(SURPRISES, encoding="utf-8")
    files.append(tmp_path / "test_kept.py")  # the scenario's own expectations, failing steps and all
    write_regression_test(run_scenario(surprises), 3, files[-1], keep_expectations=True)
    checked = subprocess.run([ruff, "check", "--no-cache", "--select", "F,E9", *map(str, files)],
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_step_zero_gives_a_valid_test_of_the_empty_cache(tmp_path):
    timeline = run_scenario(ROOT / "scenarios/tour.toml")
    source = regression_test_source(timeline, 0)
    assert "[[step]]" not in source
    assert "'nodes': 0," in source and "EXPECTED_TREE = [\n    (0, 0, {'full': (0, 1)}),\n]" in source
    run_in_process(source, tmp_path)


def test_every_step_pins_its_actual_results(tmp_path):
    source = regression_test_source(run_scenario(ROOT / "scenarios/tour.toml"), 15)
    assert 'expect = { prefix_len = 6, host_hit_length = 0, nodes = 4 }' in source  # step 3: result added
    assert 'expect_error = "not held"' in source  # step 14 keeps the error it expected
    assert "swa_" not in source and "mamba_" not in source  # a full-only config has no such fields
    assert "def test_tour(tmp_path):" in source
    run_in_process(source, tmp_path)


SURPRISES = full_header("9 surprises: the cache's way", page_size=1, kv_size=16) + """\
[[step]]
op = "insert"
key = [1, 2, 3]
expect = { prefix_len = 2, nodes = 5 }
[[step]]
op = "evict"
full = 3
expect_error = "nope"
[[step]]
op = "req_prefill"
req = "r"
tokens = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]
"""


def test_a_failed_run_is_pinned_to_what_the_cache_did(tmp_path):
    scenario = tmp_path / "surprises.toml"
    scenario.write_text(SURPRISES, encoding="utf-8")
    timeline = run_scenario(scenario)
    assert [bool(r.failures) for r in timeline.records] == [True, True, True]
    source = regression_test_source(timeline, 3)
    assert "expect = { prefix_len = 0, nodes = 1 }" in source
    assert "# step 1 (insert) expected prefix_len = 2 but got 0; pinned" in source
    assert "expect = { full_evicted = 3 }" in source  # it succeeded: no expect_error any more
    assert 'expect_error = "PoolExhaustedError: full pool exhausted' in source
    assert "# step 3 (req_prefill) failed with an error the scenario did not expect" in source
    assert "def test_9_surprises_the_cache_s_way(tmp_path):" in source
    (tmp_path / "run").mkdir()
    run_in_process(source, tmp_path / "run")  # today's behaviour passes


def test_test_names_are_identifiers():
    assert regression_test_name("tour-swa") == "test_tour_swa"
    assert regression_test_name("sglang #24153: unlock/split") == "test_sglang_24153_unlock_split"
    assert regression_test_name("✝✝") == "test_scenario"
    assert regression_test_name("9 lives").isidentifier()


def test_refuses_to_overwrite_without_force(tmp_path):
    timeline = run_scenario(ROOT / "scenarios/tour.toml")
    target = tmp_path / "test_mine.py"
    target.write_text("# the user's own test\n", encoding="utf-8")
    with pytest.raises(ScenarioError, match="file exists"):
        write_regression_test(timeline, 3, target)
    assert target.read_text(encoding="utf-8") == "# the user's own test\n"
    write_regression_test(timeline, 3, target, force=True)
    assert "def test_tour(tmp_path):" in target.read_text(encoding="utf-8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test_mine.py"]  # no temp file left


def test_refuses_a_missing_or_unwritable_directory(tmp_path):
    timeline = run_scenario(ROOT / "scenarios/tour.toml")
    with pytest.raises(ScenarioError, match="does not exist"):
        write_regression_test(timeline, 3, tmp_path / "nowhere" / "test_x.py")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):  # root writes anywhere
            pytest.skip("running as a user who can write to a read-only directory")
        with pytest.raises(ScenarioError, match="not writable"):
            write_regression_test(timeline, 3, locked / "test_x.py")
    finally:
        locked.chmod(0o700)


def test_refuses_a_step_that_has_not_run():
    timeline = run_scenario(ROOT / "scenarios/tour.toml")
    with pytest.raises(ValueError, match="step 16"):
        regression_test_source(timeline, 16)
    with pytest.raises(ValueError):
        regression_test_source(timeline, -1)


MATCHES = full_header("matches", kv_size=32) + """\
[[step]]
op = "insert"
key = [1, 2, 3, 4, 5, 6, 7, 8]
[[step]]
op = "match"
key = [1, 2, 3, 4, 5, 6, 7, 8]
expect = { prefix_len = 8 }
[[step]]
op = "insert"
key = [1, 2, 3, 4, 20, 21]
[[step]]
op = "match"
key = [1, 2, 3, 4, 20, 21, 22]
expect = { prefix_len = 6 }
"""


def test_keeping_the_scenario_s_expectations_fails_on_the_bug_and_passes_once_it_is_fixed(tmp_path, monkeypatch):
    """Issue 30: exported from a run that departs from its scenario, the pinned test takes the
    wrong values as expectations and passes on the bug. With ``keep_expectations`` the test
    is the scenario's steps as written: it fails, naming the step, until the bug is fixed."""
    from cache.controller.unified_radix_cache import UnifiedRadixCache

    def one_page_less(self, params, _match_prefix=UnifiedRadixCache.match_prefix):  # the bug: as ONE_PAGE_LESS_PLUGIN
        result = _match_prefix(self, params)
        if result.prefix_len == 0:
            return result
        return result._replace(device_indices=result.device_indices[:result.prefix_len - self.page_size])

    scenario = tmp_path / "matches.toml"
    scenario.write_text(MATCHES, encoding="utf-8")
    monkeypatch.setattr(UnifiedRadixCache, "match_prefix", one_page_less)
    buggy = run_scenario(scenario)
    found = departures(buggy, 4)
    assert found == ["step 2 (match): prefix_len: expected 8, got 7", "step 4 (match): prefix_len: expected 6, got 5"]
    assert departures(buggy, 1) == []
    kept, pinned = regression_test_source(buggy, 4, keep_expectations=True), regression_test_source(buggy, 4)
    assert "expect = { prefix_len = 8 }" in kept and "prefix_len = 7" in pinned and "prefix_len = 7" not in kept
    assert f"# fails until fixed: {found[0]}" in kept and "EXPECTED_STATE" not in kept
    for name in ("bug-kept", "bug-pinned", "fixed-kept", "fixed-pinned"):
        (tmp_path / name).mkdir()
    with pytest.raises(AssertionError, match=re.escape(found[0]) + r"\n" + re.escape(found[1])):
        run_in_process(kept, tmp_path / "bug-kept")
    run_in_process(pinned, tmp_path / "bug-pinned")  # the pinned test passes on the bug
    monkeypatch.undo()  # the bug fixed
    assert departures(run_scenario(scenario), 4) == []
    run_in_process(kept, tmp_path / "fixed-kept")
    with pytest.raises(AssertionError, match="prefix_len: expected 7, got 8"):
        run_in_process(pinned, tmp_path / "fixed-pinned")
