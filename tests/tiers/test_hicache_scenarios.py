"""The host tier in scenario files: [config] hicache, the ops load_back, evict_host
and flush, the state fields full_host_* and host_nodes, and their bad-input errors
with file:line."""

from __future__ import annotations

import pytest

from urc_util import toml, urc
from workbench.model.timeline.runner import run_scenario
from workbench.model.scenarios.scenario import ScenarioError, load_scenario

HOST_HEADER = """\
schema = 1

[scenario]
name = "host"

[config]
components = ["full"]
kv_size = 32
hicache = { write_policy = "write_through", host_kv_size = 32, load_back_threshold = 4 }
"""

STEPS = """
[[step]]
op = "insert"
key = [1, 2, 3, 4, 5, 6, 7, 8]
expect = { full_host_available = 24, full_host_evictable = 8, host_nodes = 0 }

[[step]]
op = "evict"
full = 8
expect = { full_evicted = 8, full_available = 32, host_nodes = 1, full_host_evictable = 8 }

[[step]]
op = "match"
key = [1, 2, 3, 4, 5, 6, 7, 8]
expect = { prefix_len = 0, host_hit_length = 8 }

[[step]]
op = "load_back"
key = [1, 2, 3, 4, 5, 6, 7, 8]
expect = { loaded = 8, host_hit_length = 8, full_available = 24, host_nodes = 0 }

[[step]]
op = "match"
key = [1, 2, 3, 4, 5, 6, 7, 8]
expect = { prefix_len = 8, host_hit_length = 0 }

[[step]]
op = "evict"
full = 8

[[step]]
op = "flush"

[[step]]
op = "evict_host"
full = 8
expect = { full_host_evicted = 8, nodes = 0, full_host_available = 32, host_nodes = 0 }
"""


def test_a_host_tier_scenario_runs_with_every_step_checked(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    toml("host.toml", STEPS, header=HOST_HEADER)
    timeline = run_scenario("host.toml")
    assert timeline.passed, [(r.step.index, [str(f) for f in r.failures], r.violations) for r in timeline.records]
    rc, out, err = urc(capsys, "run", "host.toml")
    assert rc == 0 and "PASS" in out
    states = [record.state for record in timeline.records]
    host_only = [v for v in states[1].nodes if v.components["full"].host_only]
    assert len(host_only) == 1 and host_only[0].components["full"].host_len == 8


@pytest.mark.parametrize("config, steps, line, says", [
    ('hicache = { write_policy = "sometimes" }', "", 6, "write_policy must be one of"),
    ("hicache = { host_kv_size = 0 }", "", 6, "host_kv_size must be a positive multiple"),
    ("", '[[step]]\nop = "evict_host"\nfull = 1\n', 9, "needs the host tier"),
    ("", '[[step]]\nop = "insert"\nkey = [1]\nexpect = { host_nodes = 0 }\n', 12, "host_nodes needs the host tier"),
    ('hicache = { transfers = "async" }', "", 6, "transfers must be one of immediate, held"),
    ("hicache = { host_mamba_size = 4 }", "", 6, "host_mamba_size needs the mamba component"),
    ("hicache = { host_swa_size = 4 }", "", 6, "host_swa_size needs the swa component"),
    ("hicache = {}", '[[step]]\nop = "evict_host"\nmamba = 1\n', 12, "needs the mamba component"),
    ("hicache = {}", '[[step]]\nop = "load_back"\nkey = [1]\nmem_quota = -1\n', 13, "must be a non-negative int"),
    ("hicache = {}", '[[step]]\nop = "insert"\nkey = [1]\nexpect = { swa_host_available = 0 }\n', 13,
     "swa_host_available is only reported with the swa component"),
    ("hicache = {}", '[[step]]\nop = "match"\nkey = [1]\nexpect = { mamba_host_hit_length = 0 }\n', 13,
     "mamba_host_hit_length is only reported with the mamba component"),
    ("hicache = {}", '[[step]]\nop = "flush"\nexpect = { done = 1 }\n', 12, "done"),
])
def test_host_tier_bad_input_is_refused_with_file_and_line(tmp_path, monkeypatch, config, steps, line, says):
    monkeypatch.chdir(tmp_path)
    header = '''schema = 1\n\n[scenario]\nname = "bad"\n\n[config]\ncomponents = ["full"]\nkv_size = 16\n''' + (
        config + "\n" if config else "")
    toml("bad.toml", steps, header=header)
    with pytest.raises(ScenarioError) as info:
        from workbench.model.scenarios.scenario import cache_config

        cache_config(load_scenario("bad.toml"))
    assert f"bad.toml:{line}:" in str(info.value) and says in str(info.value)


def test_the_timeline_keeps_each_host_lru_in_order():
    """The hybrid chapter: host-only SWA and Mamba data listed as swa_host / mamba_host,
    in the order they reached the host (the oldest is what their host eviction takes)."""
    from pathlib import Path

    timeline = run_scenario(Path(__file__).resolve().parents[2] / "scenarios" / "tour_hicache_hybrid.toml")
    assert timeline.passed
    demoted = timeline.state_after(5)
    assert demoted.lru["swa_host"] == (1,) and demoted.lru["mamba_host"] == (1,)
    both = timeline.state_after(10)  # C2 (#3) demoted first, then C1 (#1): C2 is the oldest
    assert both.lru["swa_host"] == (1, 3) and both.lru["mamba_host"] == (1, 3)
    assert timeline.state_after(11).lru["swa_host"] == (1,)  # SWA's host eviction took C2 whole
