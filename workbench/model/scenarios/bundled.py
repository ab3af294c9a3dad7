"""Where the scenarios that ship with urc live (the tour among them): ``urc tui`` opens
them when given no files, and the workbench writes exports of them to the current
directory instead (a user's files never land inside the checkout or the package)."""

from __future__ import annotations

from pathlib import Path

BUNDLED_DIR = Path(__file__).resolve().parents[3] / "scenarios"


def is_bundled(path: str) -> bool:
    """True for a file inside the bundled scenarios' folder (or below it)."""
    if path.startswith("<"):
        return False
    try:
        return Path(path).resolve().is_relative_to(BUNDLED_DIR)
    except OSError:
        return False
