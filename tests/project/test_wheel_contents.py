"""The wheel is a working tool on its own: it carries the bundled scenarios (the tour,
the bug and fuzz repros) and the TUI's stylesheet, and nothing of the checkout beside
them (`make wheel-test` installs it and opens the tour from another directory)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_holds_every_bundled_scenario_and_the_stylesheet(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(ROOT)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    bundled = "workbench/model/scenarios/bundled/"
    scenarios = {str(p.relative_to(ROOT / "scenarios")) for p in (ROOT / "scenarios").rglob("*") if p.is_file()}
    assert scenarios and {bundled + name for name in scenarios} <= names
    assert "workbench/tui/workbench.tcss" in names
    assert not any(name.startswith(("tests/", "scenarios/", "tools/", "docs/")) for name in names)
