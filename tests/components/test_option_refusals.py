"""Bad option values are bad input: ``urc fuzz --option``, a scenario's [config] and
``--jobs`` are refused in one line with exit 2, never an internal error; a valid option
runs; and the config line names what the cache runs with."""

from __future__ import annotations

from pathlib import Path

import pytest

from cache.config.reference import config_line
from urc_util import assert_invalid, main_without_torch, toml, urc
from workbench.model.fuzzing.campaign import default_jobs
from workbench.model.fuzzing.config import FuzzConfig

ROOT = Path(__file__).resolve().parents[2]
SMALL = ("--steps", "20", "--jobs", "1")  # one short episode, here


def refused(capsys, *argv: str, says: str) -> str:
    """``urc ARGV`` exits 2 with one stderr line that says ``says``."""
    rc, out, err = urc(capsys, *argv)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (rc, out, err)
    assert "internal error" not in lines[0] and says in lines[0], lines[0]
    return lines[0]


def test_an_unknown_option_is_named_with_the_close_names(capsys):
    refused(capsys, "fuzz", "--option", "frobnicate=1", *SMALL, says="'frobnicate': not a [config] field")
    line = refused(capsys, "fuzz", "--option", "eviction_polcy=lfu", *SMALL, says="'eviction_polcy'")
    assert "did you mean 'eviction_policy'" in line


def test_a_component_option_runs_and_its_bad_value_is_refused_before_torch(capsys):
    rc, out, err = urc(capsys, "fuzz", "--config", "full,mamba", "--option", "mamba_max_states_per_path=2", *SMALL)
    assert rc == 0 and "Full+Mamba p1 mamba_max_states_per_path=2" in out, err
    codes, torch_loaded, err = main_without_torch(
        ["fuzz", "--config", "full,mamba", "--option", "mamba_max_states_per_path=0"],
        ["fuzz", "--config", "full,mamba", "--option", 'mamba_max_states_per_path="two"'],
        ["fuzz", "--config", "full,swa", "--option", "swa_draft_windw=8"])
    assert (codes, torch_loaded) == ([2, 2, 2], False), err
    assert "mamba_max_states_per_path must be -1 (no cap) or a positive int (got 0)" in err
    assert "did you mean 'swa_draft_window'" in err


@pytest.mark.parametrize("policy, args, says", [
    ("slru", "{ protected_threshold = -1 }", "protected_threshold must be a finite number, 0 or more (got -1)"),
    ("tlru", "{ threshold = nan }", "threshold must be a finite number, 0 or more (got nan)"),
])
def test_a_policy_argument_out_of_range_is_refused_in_a_file_and_as_an_option(capsys, tmp_path, policy, args, says):
    path = toml(str(tmp_path / "p.toml"), f'eviction_policy = "{policy}"\neviction_policy_config = {args}\n'
                                          '[[step]]\nop = "insert"\nkey = [1, 2]\n')
    assert_invalid(capsys, ["run", path], f"{path}:6", says=says)  # the [config] table's line
    refused(capsys, "fuzz", "--option", f"eviction_policy={policy}", "--option",
            f"eviction_policy_config={args.replace(' ', '')}", *SMALL, says=says)


def test_an_option_value_is_toml_or_a_bare_word_and_of_its_field_type(capsys):
    rc, out, err = urc(capsys, "fuzz", "--option", "eviction_policy=lfu", "--config", "full", *SMALL)
    assert rc == 0 and "eviction_policy=lfu" in out, err  # a bare word is a string (the README's examples)
    refused(capsys, "fuzz", "--option", 'eviction_policy=lfu"', *SMALL, says="is not a TOML value")
    refused(capsys, "fuzz", "--option", "faults=3", *SMALL, says="--option faults: must be a list (got 3)")
    refused(capsys, "fuzz", "--option", "is_eagle=yes", *SMALL, says="--option is_eagle: must be true or false")


def test_jobs_past_the_usable_cores_need_force(capsys):
    too_many = default_jobs() + 1
    refused(capsys, "fuzz", "--jobs", str(too_many), "--steps", "20",
            says=f"--jobs {too_many} is more than the {default_jobs()} usable cores")
    rc, out, err = urc(capsys, "fuzz", "--config", "full", "--steps", "20", "--jobs", str(too_many), "--force")
    assert rc == 0 and "no failure in 20 steps" in out, err  # one episode: one process


def test_the_config_line_leaves_out_eagle_where_mamba_turns_it_off(capsys):
    assert "is_eagle" not in config_line({"components": ["full", "mamba"], "mamba_size": 4, "is_eagle": True})
    assert "is_eagle=true" in config_line({"components": ["full", "swa"], "sliding_window": 4, "is_eagle": True})
    assert FuzzConfig(("full", "mamba")).with_options({"is_eagle": True}).label() == "Full+Mamba p1"
    rc, out, err = urc(capsys, "fuzz", "--config", "full,mamba", "--option", "is_eagle=true", *SMALL)
    assert rc == 0 and "(Full+Mamba p1, seed 0" in out, err
