"""The scenarios that ship with urc open by name (``urc run tour``, ``urc tui bugs/…``),
a path the user gives always wins, an unknown name is one line and exit 2, and nothing
is written beside a bundled scenario."""

from __future__ import annotations

from pathlib import Path

import pytest

from urc_util import urc
from workbench.model.scenarios.bundled import bundled_names, bundled_path, bundled_root, is_bundled
from workbench.model.scenarios.scenario import ScenarioError, load_scenario

ROOT = Path(__file__).resolve().parents[2]
BUG = "bugs/sglang-18843-hit-count-never-counted"


def test_a_name_opens_the_bundled_scenario_with_or_without_its_suffix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert Path(load_scenario("tour").path) == ROOT / "scenarios" / "tour.toml"
    assert Path(load_scenario(BUG + ".toml").path) == ROOT / "scenarios" / f"{BUG}.toml"
    assert "tour" in bundled_names() and BUG in bundled_names()


def test_a_file_that_exists_wins_over_a_bundled_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("tour.toml").write_text('schema = 1\n[scenario]\nname = "mine"\n[config]\ncomponents = ["full"]\nkv_size = 8\n')
    assert load_scenario("tour.toml").name == "mine"
    assert bundled_path("tour.toml") is None
    assert load_scenario("tour").name == "tour"  # no file of that exact name: the bundled one


@pytest.mark.parametrize("name", ["../README.md", "../pyproject", "/etc/passwd", "", "-"])
def test_a_name_never_reaches_outside_the_bundled_folder(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert bundled_path(name) is None


def test_an_unknown_name_is_one_line_and_exit_2(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = urc(capsys, "run", "bugs/no-such-bug")
    assert rc == 2 and out == "" and len(err.splitlines()) == 1
    assert "no such file, nor a bundled scenario" in err
    with pytest.raises(ScenarioError, match="no such file"):
        load_scenario("no-such.toml")


def test_urc_run_opens_bundled_scenarios_by_name_from_any_directory(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = urc(capsys, "run", "tour", BUG)
    assert rc == 0, err
    assert out.count("PASS") == 2 and list(tmp_path.iterdir()) == []


def test_the_exports_of_a_bundled_scenario_default_to_the_current_directory(tmp_path, monkeypatch):
    from workbench.tui.app import WorkbenchApp

    monkeypatch.chdir(tmp_path)
    bundled = WorkbenchApp([load_scenario("tour")], background=False)
    assert bundled._beside_scenario("tour-step1.svg") == "tour-step1.svg"
    (tmp_path / "mine").mkdir()
    copy = tmp_path / "mine" / "tour.toml"
    copy.write_text((ROOT / "scenarios" / "tour.toml").read_text())
    assert not is_bundled(str(copy)) and is_bundled(str(bundled_root() / "tour.toml"))
    own = WorkbenchApp([load_scenario(copy)], background=False)
    assert own._beside_scenario("tour-step1.svg") == str(tmp_path / "mine" / "tour-step1.svg")


def test_urc_version_names_the_sglang_version_it_follows(capsys):
    rc, out, _ = urc(capsys, "--version")
    assert rc == 0 and "follows SGLang 0.5.23" in out
