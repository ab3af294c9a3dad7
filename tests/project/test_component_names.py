"""No module of the cache outside a component's own folder names a component: a rule
that holds for one component holds through a fact its folder declares (a constant
the registry reads, a class attribute), so adding a component touches its folder
and one registry line. Docstrings and comments may name them; code may not."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# besides the components' own folders: the registry's line of them, Full KV's name
# (which every room speaks), and the fault catalogue (each fault is one component's bug)
ALLOWED = ("cache/components/__init__.py", "cache/basics/base_component.py")
ALLOWED_ROOMS = ("cache/faults/",)


def component_names(root: Path) -> set[str]:
    """The components that have a folder: the names to look for."""
    return {p.parent.name for p in (root / "cache" / "components").glob("*/__init__.py")}


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring constants (a module's, a class's, a function's)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def named_components(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) for each string constant in code that is a component's name."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
            and id(node) not in docs]


def offenders(root: Path) -> list[str]:
    """``path:line: 'name'`` for each component named in the cache outside its folder."""
    names = component_names(root)
    folders = tuple(f"cache/components/{name}/" for name in names)
    out = []
    for path in sorted((root / "cache").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in ALLOWED or rel.startswith(folders + ALLOWED_ROOMS):
            continue
        out += [f"{rel}:{line}: {name!r}" for line, name in named_components(path.read_text(), names)]
    return out


def test_no_component_is_named_outside_its_folder():
    assert offenders(ROOT) == []


def test_the_check_finds_a_planted_name(tmp_path):
    """A name compared in code is caught; the same name in a docstring or a comment,
    or inside a longer string, is not; a component's own folder may name itself."""
    for name in ("full", "swa"):
        (tmp_path / "cache" / "components" / name).mkdir(parents=True)
        (tmp_path / "cache" / "components" / name / "__init__.py").write_text('NAME = "swa"\n')
    (tmp_path / "cache" / "tree").mkdir()
    (tmp_path / "cache" / "tree" / "walk.py").write_text(
        '"""Walks that skip "swa"."""\n\n'
        "def walk(component):\n"
        '    """Skips swa."""\n'
        '    label = "pool=swa"  # "swa" here is a comment\n'
        '    if component.name == "swa":\n'
        "        return label\n")
    assert offenders(tmp_path) == ["cache/tree/walk.py:6: 'swa'"]
