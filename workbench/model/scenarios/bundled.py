"""The scenarios that ship with urc (the tour, the bug repros, the fuzz repros), opened
by name: ``urc tui tour``, ``urc run bugs/sglang-18843-hit-count-never-counted``.

In a checkout they are the repository's ``scenarios/`` folder; an installed wheel holds
a copy of it as package data (``bundled/`` beside this module, put there by the build:
``setup.py``). A name is looked up there only when it is not a file that exists: a
path the user gives always wins."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

SUFFIXES = (".toml", ".jsonl")
INSTALLED = Path(__file__).with_name("bundled")  # an installed wheel's copy
CHECKOUT = Path(__file__).resolve().parents[3] / "scenarios"  # the repository's own folder


def bundled_root() -> Path:
    """The folder the bundled scenarios are read from: the wheel's copy when there is
    one, else the checkout's ``scenarios/``."""
    return INSTALLED if INSTALLED.is_dir() else CHECKOUT


def bundled_path(name: str) -> Optional[Path]:
    """The bundled scenario ``name`` stands for (``tour``, ``bugs/NAME``, with or
    without ``.toml``), or None: a name that exists as a file, that leaves the bundled
    folder (``..``, an absolute path) or that names nothing bundled."""
    if not name or name == "-" or Path(name).exists():
        return None
    root = bundled_root().resolve()
    for candidate in (name, *(name + suffix for suffix in SUFFIXES if not name.endswith(suffix))):
        found = (root / candidate).resolve()
        if found.is_file() and found.is_relative_to(root) and found.suffix in SUFFIXES:
            return found
    return None


def resolve_name(name: str) -> str:
    """``name`` itself when it is a path (or names nothing bundled, so that the usual
    "no such file" says so), else the bundled scenario's path."""
    found = bundled_path(str(name))
    return str(found) if found is not None else name


def is_bundled(path: str) -> bool:
    """Whether ``path`` is one of the bundled scenarios (their exports go to the current
    directory: an installed package is no place to write)."""
    try:
        return Path(path).resolve().is_relative_to(bundled_root().resolve())
    except (OSError, ValueError):
        return False


def bundled_names() -> list[str]:
    """Every bundled scenario, as the name that opens it (``bugs/NAME``), sorted."""
    root = bundled_root()
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.toml"))


TOUR = ("tour", "tour_swa", "tour_mamba", "tour_sidecar", "tour_hicache", "tour_hicache_hybrid", "tour_sessions",
        "tour_storage")  # the tour's chapters, in order: bundled scenarios, opened by name


def tour_files() -> list[str]:
    """The bundled tour's chapters, the files ``urc tui`` opens when given none."""
    return [str(bundled_path(name)) for name in TOUR]
