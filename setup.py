"""The build's one addition to pyproject.toml: the wheel carries a copy of the repository's
``scenarios/`` folder (the tour, the bug and fuzz repros) as package data, at
``workbench/model/scenarios/bundled/``, where ``urc tui tour`` and ``urc run bugs/NAME``
find it once installed (workbench/model/scenarios/bundled.py). A checkout reads the
folder itself, so an editable install copies nothing."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SCENARIOS = Path(__file__).resolve().parent / "scenarios"
BUNDLED = Path("workbench", "model", "scenarios", "bundled")


class BuildWithScenarios(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / BUNDLED
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(SCENARIOS, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildWithScenarios})
