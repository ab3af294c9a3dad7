"""The fuzzer with 0.5.23's model options: ``urc fuzz --option NAME=VALUE`` and
``--sweep-options`` (episodes rotating through options.py's option sets), and the
option sets themselves (each one a config the cache builds)."""

from __future__ import annotations

import pytest

from cache.config.cache_config import CacheConfig
from urc_util import urc
from workbench.cli.fuzz import parse_options
from workbench.model.fuzzing.config import FuzzConfig
from workbench.model.fuzzing.fuzz import fuzz
from workbench.model.fuzzing.options import OPTION_SETS, option_set, option_sets_for
from workbench.model.scenarios.scenario import ScenarioError


def test_option_values_are_read_as_toml_and_bare_words_as_strings():
    assert parse_options(["eviction_policy=lfu", "mamba_max_states_per_path=2", "is_eagle=true",
                          "eviction_policy_config={protected_threshold=1}"]) == {
        "eviction_policy": "lfu", "mamba_max_states_per_path": 2, "is_eagle": True,
        "eviction_policy_config": {"protected_threshold": 1}}
    with pytest.raises(ScenarioError, match="NAME=VALUE"):
        parse_options(["lfu"])


def test_a_config_with_options_stays_hashable_and_names_them():
    config = FuzzConfig(("full",), 4).with_options({"eviction_policy": "slru",
                                                     "eviction_policy_config": {"protected_threshold": 1}})
    assert hash(config) == hash(FuzzConfig(("full",), 4).with_options(dict(config.options)))
    assert config.label() == "Full p4 eviction_policy=slru eviction_policy_config={protected_threshold=1}"
    assert config.scenario_config()["eviction_policy_config"] == {"protected_threshold": 1}


@pytest.mark.parametrize("row", OPTION_SETS, ids=lambda r: r.label())
def test_every_option_set_builds_a_cache_on_the_components_it_needs(row):
    assert row.options and row.fits(row.needs) and row in option_sets_for(("full", "swa", "mamba")) + [
        r for r in OPTION_SETS if "sidecar" in r.needs]
    for page in row.pages:
        config = FuzzConfig(row.needs, page).with_options(dict(row.options)).scenario_config()
        CacheConfig.of(**{**config, "components": tuple(config["components"])})


def test_sweeping_runs_each_episode_with_the_next_option_set():
    sets = [option_set(eviction_policy="lfu"), option_set(eviction_policy="mru")]
    result = fuzz(FuzzConfig(("full",), 1), 0, 90, episode_steps=30, option_sets=sets)
    assert result.finding is None and result.episode == 2
    assert result.config.option("eviction_policy") == "lfu"  # episodes 0, 1, 2: lfu, mru, lfu
    shorter = fuzz(FuzzConfig(("full",), 1), 0, 60, episode_steps=30, option_sets=sets)
    assert shorter.config.option("eviction_policy") == "mru"


def test_urc_fuzz_refuses_an_option_the_cache_refuses_in_one_line(capsys):
    rc, out, err = urc(capsys, "fuzz", "--option", "eviction_policy=nope", "--steps", "10")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "nope" in err


def test_urc_fuzz_sweeps_the_option_sets_and_reports_clean_runs(capsys):
    import json

    rc, out, err = urc(capsys, "fuzz", "--config", "full", "--sweep-options", "--steps", "60", "--json")
    report = json.loads(out)
    assert rc == 0 and report["finding"] is None and report["option_sets"] == len(option_sets_for(("full",)))


def test_faults_new_adds_only_the_missing_rows_in_catalogue_order(tmp_path, capsys):
    """``urc fuzz --faults new``: a fault added to the catalogue gets its row and repro
    without re-running the rest; the file it merges into is only rewritten with --force."""
    import json
    from pathlib import Path

    from cache.faults import catalogue

    committed = json.loads((Path(__file__).resolve().parents[2] / "scenarios" / "fuzz" / "detections.json").read_text())
    missing = "lock-skips-matched-node"  # flagged at the first seed of its first config
    (tmp_path / "detections.json").write_text(json.dumps([r for r in committed if r["fault"] != missing]))
    before = (tmp_path / "detections.json").read_text()
    rc, _, err = urc(capsys, "fuzz", "--faults", "new", "-o", str(tmp_path))
    assert rc == 2 and "--force" in err and (tmp_path / "detections.json").read_text() == before
    rc, out, _ = urc(capsys, "fuzz", "--faults", "new", "-o", str(tmp_path), "--force", "--shrink-budget", "5", "--json")
    rows = json.loads((tmp_path / "detections.json").read_text())
    assert rc == 0 and json.loads(out) == rows  # the whole table, as the README prints it
    assert [r["fault"] for r in rows] == [name for name in catalogue() if name in {r["fault"] for r in committed}]
    new = next(r for r in rows if r["fault"] == missing)
    old = next(r for r in committed if r["fault"] == missing)
    assert {k: v for k, v in new.items() if k != "shrunk_steps"} == {k: v for k, v in old.items() if k != "shrunk_steps"}
    assert (tmp_path / f"{missing}.toml").exists() and len(list(tmp_path.glob("*.toml"))) == 1
