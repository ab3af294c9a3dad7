"""The layers stay apart: the cache knows nothing of the workbench, and the
workbench's model (what the TUI and SVG will render) pulls in no rendering library.
The workbench is rooms by role (command line, benchmarks, bridge, recorder, model,
renderers, TUI) and the model is rooms by subject, so a newcomer finds code by name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# the model's rooms and what each holds
ROOMS = {  # lowest first: a module imports only its own room or one above it here
    "ops": ["spec", "keys", "locks", "evict", "requests", "request_view", "host", "retraction", "sessions", "streaming",
            "storage"],  # every op, declared once
    "scenarios": ["scenario", "bundled", "step", "names", "errors", "inputs", "fields", "session_fields", "node_refs",
                  "node_fields", "request_fields", "writer", "live",
                  "live_words", "live_format", "workload", "outputs", "stream", "storage_place"],  # scenario files in and out
    "timeline": ["driver", "runner", "kv_router", "timeline", "states", "follow", "diff", "export", "fmt", "packed",
                 "shown_tree", "shown_sessions", "step_view", "request_diff", "metric_rows", "series", "search",
                 "state_fields", "stored", "store_columns", "store_file", "store_codec", "store_rows", "step_index",
                 "step_hold", "store_run", "state_deltas", "state_deltas_read"],  # running a scenario, the states it leaves, stored runs
    "kv_wire": ["wire", "publisher", "publish", "listener", "view", "session", "store", "live"],  # KV events over ZMQ
    "debugging": ["cursor", "why", "why_text", "why_request", "why_session", "why_prefetch", "breakpoints",
                  "regression_test"],  # moving through the states, asking why
    "fuzzing": ["config", "fuzz", "generator", "options", "shrink", "shrink_file", "shrink_tail", "campaign", "sweep", "ray_pool"],
}
MODEL = [f"{room}.{module}" for room, modules in ROOMS.items() for module in modules]
# the workbench's rooms by role; its root holds only its entry points
WORKBENCH = ["bench", "bridge", "cli", "model", "record", "render", "tui"]


def imported_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    return set(out.split())


def test_the_model_imports_no_rendering_library():
    modules = imported_after("\n".join(f"import workbench.model.{m}" for m in MODEL))
    assert {m.split(".")[0] for m in modules} & {"rich", "textual"} == set()


def test_the_cache_imports_nothing_from_the_workbench_or_a_renderer():
    modules = imported_after("import cache, cache.controller.unified_radix_cache, cache.checks.invariants, cache.controller.snapshot")
    roots = {m.split(".")[0] for m in modules}
    assert roots & {"workbench", "rich", "textual", "graphviz", "networkx"} == set()


def test_the_tui_reaches_the_cache_only_through_the_model():
    """Widgets render the model; no TUI module imports the controller, runner or session."""
    for path in (ROOT / "workbench" / "tui").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for forbidden in ("cache.controller", "UnifiedRadixCache", "timeline.runner", "timeline.driver"):
            assert forbidden not in text, f"{path.relative_to(ROOT)} uses {forbidden}"


def test_every_model_module_is_in_its_room():
    model = ROOT / "workbench" / "model"
    assert sorted(p.name for p in model.iterdir() if p.name != "__pycache__") == sorted(["__init__.py", *ROOMS])
    for room, modules in ROOMS.items():
        found = sorted(p.stem for p in (model / room).glob("*.py") if p.stem != "__init__")
        assert found == sorted(modules), room
        assert (model / room / "__init__.py").read_text().startswith('"""'), f"{room}: say what the room holds"


def test_the_workbench_root_holds_rooms_and_its_entry_points():
    root = ROOT / "workbench"
    assert sorted(p.name for p in root.glob("*.py")) == ["__init__.py", "__main__.py"]
    assert sorted(p.name for p in root.iterdir() if p.is_dir() and p.name != "__pycache__") == WORKBENCH


TEST_SUBJECTS = ["bridge", "components", "faults", "fuzz", "model", "observe", "project", "render", "requests", "safety",
                 "sessions", "tiers", "tree"]


def test_tests_live_in_folders_by_subject():
    """A test file sits in its subject's folder; the top of tests/ keeps only the shared
    helpers (``*_util.py``), conftest and the data the subjects share."""
    tests = ROOT / "tests"
    loose = sorted(p.name for p in tests.glob("*.py") if p.name != "conftest.py" and not p.name.endswith("_util.py"))
    assert not loose, loose
    folders = sorted(p.name for p in tests.iterdir() if p.is_dir() and any(p.glob("test_*.py")))
    assert folders == TEST_SUBJECTS


def test_no_module_grows_past_the_limit():
    """Each module stays readable alone: none of the cache's or the workbench's passes
    450 lines. A per-file limit instead of a budget for the whole core: a room may grow
    with the features it serves, a file may not."""
    files = [p for room in ("cache", "workbench") for p in (ROOT / room).rglob("*.py")]
    over = {str(p.relative_to(ROOT)): n for p in files if (n := len(p.read_text().splitlines())) > 450}
    assert not over, over


def _op_name_strings(path: Path, names: set[str]) -> set[str]:
    """Op names written as string values in a module: a dict key or a subscript is a
    field or output name that reads the same (``"check": …``), not the op."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    data_keys = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            data_keys.update(id(k) for k in node.keys if k is not None)
        elif isinstance(node, ast.Subscript):
            data_keys.add(id(node.slice))
    return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and node.value in names
            and id(node) not in data_keys}


def test_every_op_is_named_in_at_most_two_workbench_files():
    """Issue 24: an op is declared once (its module in workbench/model/ops/); its name
    appears as a string in at most one other non-test file (a field that reads the same,
    e.g. req_finish's ``insert``). Everything else reads the registry."""
    from workbench.model import ops

    names = {spec.name for spec in ops.all_ops()}
    files: dict[str, list[str]] = {}
    for path in (ROOT / "workbench").rglob("*.py"):
        for name in _op_name_strings(path, names):
            files.setdefault(name, []).append(str(path.relative_to(ROOT)))
    crowded = {name: sorted(where) for name, where in files.items() if len(where) > 2}
    assert not crowded, crowded
    for name, where in files.items():
        assert any("/ops/" in w for w in where), (name, where)  # declared in the registry


CLI = ROOT / "workbench" / "cli"
CLI_SHARED = {"__init__", "__main__", "common", "against"}  # the package, and what subcommands share


def _cli_imports(path: Path) -> set[str]:
    """The workbench/cli modules a module imports, at the top or inside a function
    (a lazy import closes a cycle just as well); ``__init__`` stands for the package."""
    import ast

    modules = {p.stem for p in CLI.glob("*.py")}
    own = path.stem
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level == 1:  # relative to workbench.cli
                base = f"workbench.cli.{base}".rstrip(".")
            elif node.level > 1:  # .. reaches outside the package
                base = "outside"
            names = [f"{base}.{alias.name}" for alias in node.names] if base == "workbench.cli" else [base]
        else:
            continue
        for name in names:
            if name == "workbench.cli":
                found.add("__init__")
            elif name.startswith("workbench.cli."):
                part = name.split(".")[2]
                found.add(part if part in modules else "__init__")
    return found - {own}


def test_no_import_cycle_among_the_cli_modules():
    """cli.py and cli_bench.py once imported each other. Now every module of workbench/cli
    imports only modules below it: a subcommand imports common and against, against imports
    common, common none; only the package imports the subcommands. Nothing else in the
    workbench imports the command line but ``python -m workbench``."""
    graph = {p.stem: _cli_imports(p) for p in CLI.glob("*.py")}
    subcommands = set(graph) - CLI_SHARED
    assert graph["__init__"] >= subcommands  # the package builds its parser from them all
    for name in subcommands:
        assert graph[name] <= {"common", "against"}, (name, graph[name])
    assert graph["against"] <= {"common"} and graph["common"] == set()

    def cycle_from(start: str, path: tuple[str, ...]) -> tuple[str, ...] | None:
        for nxt in sorted(graph[path[-1]]):
            if nxt == start:
                return path + (nxt,)
            if nxt not in path and (found := cycle_from(start, path + (nxt,))):
                return found
        return None

    cycles = [c for m in graph if (c := cycle_from(m, (m,)))]
    assert not cycles, cycles
    outside = [p for p in (ROOT / "workbench").rglob("*.py") if CLI not in p.parents and p.name != "__main__.py"]
    users = [str(p.relative_to(ROOT)) for p in outside
             if "workbench.cli" in p.read_text(encoding="utf-8") or "from .cli" in p.read_text(encoding="utf-8")]
    assert users == []
    assert list((ROOT / "workbench").glob("cli_*.py")) == []


def test_cycle_finder_sees_a_lazy_import_back(tmp_path, monkeypatch):
    """The check above would have caught the old cli <-> cli_bench cycle (a lazy import)."""
    (tmp_path / "__init__.py").write_text("from . import bench\n")
    (tmp_path / "bench.py").write_text("def run():\n    from . import _load_all\n")
    (tmp_path / "common.py").write_text("from ..model import scenario\n")
    monkeypatch.setattr(sys.modules[__name__], "CLI", tmp_path)
    assert _cli_imports(tmp_path / "bench.py") == {"__init__"}
    assert _cli_imports(tmp_path / "__init__.py") == {"bench"}
    assert _cli_imports(tmp_path / "common.py") == set()


def test_each_subcommand_is_its_own_module():
    """``urc X`` is built and run by workbench/cli/X.py alone (its add_parser and run),
    listed once in SUBCOMMANDS; adding one is a module and a line."""
    import importlib

    from workbench.cli import SUBCOMMANDS, build_parser

    sub = next(a for a in build_parser()._actions if a.choices and a.dest == "command")
    names = list(sub.choices)
    assert names == [m.__name__.rsplit(".", 1)[1] for m in SUBCOMMANDS]
    assert sorted(p.stem for p in CLI.glob("*.py") if p.stem not in CLI_SHARED) == sorted(names)
    for name in names:
        module = importlib.import_module(f"workbench.cli.{name}")
        assert callable(module.add_parser)
        assert sub.choices[name].get_default("handler") is module.run, name


def _import_graph(package: str) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, read from the source: imports inside
    functions and under ``TYPE_CHECKING`` count (a circle through either still ties
    two files together for a reader)."""
    import ast

    files = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for p in (ROOT / package).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = ".".join(here[:len(here) - node.level + 1] + [node.module or ""]).strip(".") if node.level \
                    else node.module or ""
                found |= {base, *(f"{base}.{a.name}" for a in node.names)}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
        graph[module] = {m for m in found if m in files and m != module}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected groups of more than one module (Tarjan's walk)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in graph[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = set()
            while True:
                other = stack.pop()
                group.add(other)
                if other == module:
                    break
            if len(group) > 1:
                found.append(group)

    for module in graph:
        if module not in index:
            visit(module)
    return found


def test_the_workbench_has_no_import_circle():
    assert _circles(_import_graph("workbench")) == []


# The dependency contract: each package's rooms, lowest first. A module imports only
# from its own room or a room below it (imports inside functions and under
# TYPE_CHECKING count: a type-only need is a protocol in the lower room).
CACHE_ROOMS = ("basics", "observe", "pools", "tree", "components", "tiers", "faults", "config", "sessions",
               "requests", "controller", "checks")


def _arrows_up(package: str, rooms: tuple[str, ...]) -> list[str]:
    """Every import from a room to a higher one, as ``a -> b``."""
    def room(module: str) -> str | None:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 else None  # the package's own __init__ is its door

    up = []
    for module, targets in sorted(_import_graph(package).items()):
        for target in sorted(targets):
            here, there = room(module), room(target)
            if here is not None and there is not None and rooms.index(there) > rooms.index(here):
                up.append(f"{module} -> {target}")
    return up


def test_the_cache_is_rooms_in_order():
    """The cache's top holds its door and its rooms, each saying what it owns and what
    it may import; no arrow runs up, no circle anywhere."""
    cache = ROOT / "cache"
    assert sorted(p.name for p in cache.iterdir() if p.name != "__pycache__") == sorted(["__init__.py", *CACHE_ROOMS])
    for room in CACHE_ROOMS:
        doc = (cache / room / "__init__.py").read_text()
        assert doc.startswith('"""') and ("May import" in doc or "Imports nothing" in doc), room
    assert _arrows_up("cache", CACHE_ROOMS) == []
    assert _circles(_import_graph("cache")) == []


# the workbench's rooms, lowest first; its entry point (__main__) on top
WORKBENCH_ROOMS = ("model", "render", "tui", "bench", "bridge", "record", "cli", "__main__")


def test_the_workbench_is_rooms_in_order():
    """The model renders nothing and the renderers drive nothing; bench, bridge and
    recorder stand beside the TUI, and only the command line sits on them all. Inside
    the model, ops < scenarios < timeline < kv_wire < debugging < fuzzing."""
    assert _arrows_up("workbench", WORKBENCH_ROOMS) == []
    order = list(ROOMS)
    graph = _import_graph("workbench.model".replace(".", "/"))
    up = [f"{a} -> {b}" for a, targets in graph.items() for b in targets
          if a.count(".") > 2 and b.count(".") > 2 and order.index(b.split(".")[2]) > order.index(a.split(".")[2])]
    assert up == []


def test_the_order_check_sees_an_arrow_up(tmp_path, monkeypatch):
    """The contract check would have caught the tree importing a component's base
    class under TYPE_CHECKING."""
    for room in ("tree", "components"):
        (tmp_path / "pkg" / room).mkdir(parents=True)
        (tmp_path / "pkg" / room / "__init__.py").write_text("")
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "components" / "base.py").write_text("from ..tree import core\n")
    (tmp_path / "pkg" / "tree" / "core.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..components.base import Base\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert _arrows_up("pkg", ("tree", "components")) == ["pkg.tree.core -> pkg.components.base"]
    assert _circles(_import_graph("pkg")) == [{"pkg.tree.core", "pkg.components.base"}]


def test_the_circle_finder_finds_one():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert _circles({"a": {"b"}, "b": set()}) == []
