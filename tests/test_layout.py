"""The layers stay apart: the cache knows nothing of the workbench, and the
workbench's model (what the TUI and SVG will render) pulls in no rendering library."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = ["scenario", "session", "runner", "timeline", "states", "diff", "export", "outputs", "workload", "fmt", "cursor",
         "why", "breakpoints", "follow", "live", "regression_test", "scenario_writer", "fuzz", "shrink"]


def imported_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    return set(out.split())


def test_the_model_imports_no_rendering_library():
    modules = imported_after("\n".join(f"import workbench.model.{m}" for m in MODEL))
    assert {m.split(".")[0] for m in modules} & {"rich", "textual"} == set()


def test_the_cache_imports_nothing_from_the_workbench_or_a_renderer():
    modules = imported_after("import cache, cache.controller, cache.invariants, cache.snapshot")
    roots = {m.split(".")[0] for m in modules}
    assert roots & {"workbench", "rich", "textual", "graphviz", "networkx"} == set()


def test_the_tui_reaches_the_cache_only_through_the_model():
    """Widgets render the model; no TUI module imports the controller, runner or session."""
    for path in (ROOT / "workbench" / "tui").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for forbidden in ("cache.controller", "UnifiedRadixCache", "model.runner", "model.session"):
            assert forbidden not in text, f"{path.relative_to(ROOT)} uses {forbidden}"


def test_every_model_module_is_in_the_model_package():
    assert sorted(p.stem for p in (ROOT / "workbench" / "model").glob("*.py") if p.stem != "__init__") == sorted(MODEL)
