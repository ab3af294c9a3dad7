"""The docs name files that exist: the reading path and the how-tos are followed file
by file, so a move that leaves them pointing nowhere fails here."""

from __future__ import annotations

import re
from pathlib import Path

from test_layout import CACHE_ROOMS

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").rglob("*.md"))
PATH = re.compile(r"`((?:cache|workbench|tests)/[\w/.*<>-]+)`")


def test_every_file_the_docs_name_exists():
    missing = []
    for doc in DOCS:
        for name in PATH.findall(doc.read_text(encoding="utf-8")):
            if "<" in name:  # a pattern for the reader to fill in (components/<name>/)
                continue
            if not list(ROOT.glob(name.rstrip("/"))):
                missing.append(f"{doc.relative_to(ROOT)}: {name}")
    assert DOCS and not missing, missing


def test_the_architecture_lists_the_rooms_in_their_order():
    text = (ROOT / "docs" / "explanation" / "architecture.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+)/` \|", text, flags=re.M)
    assert rows == list(CACHE_ROOMS)


def test_the_how_to_names_the_registry_lines_that_exist():
    text = (ROOT / "docs" / "how-to" / "extend-the-cache.md").read_text(encoding="utf-8")
    registry = (ROOT / "cache" / "components" / "__init__.py").read_text(encoding="utf-8")
    policies = (ROOT / "cache" / "tree" / "leaf_policies.py").read_text(encoding="utf-8")
    assert "_BUILT_IN" in text and "_BUILT_IN = (" in registry
    assert "POLICIES" in text and "POLICIES: dict" in policies
