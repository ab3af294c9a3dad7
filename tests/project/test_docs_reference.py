"""The reference pages are the registries' own words: each page in docs/reference/ is
what tools/gen_reference.py makes from the op registry, the config reference, the fault
catalogue, the parser, the binding table and the exit codes, so none is written twice."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "tools" / "gen_reference.py")
gen_reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen_reference)


@pytest.mark.parametrize("name", sorted(gen_reference.PAGES))
def test_each_reference_page_is_what_the_registries_make(name):
    page = ROOT / "docs" / "reference" / name
    assert page.exists() and page.read_text(encoding="utf-8") == gen_reference.PAGES[name](), \
        "regenerate it: make docs (or python tools/gen_reference.py)"


def test_the_pages_name_every_op_fault_command_and_key():
    from cache.faults import catalogue
    from workbench.cli import SUBCOMMANDS
    from workbench.model import ops
    from workbench.tui.bindings import COMMANDS

    pages = gen_reference.pages()
    assert all(f"`{spec.name}" in pages["ops.md"] for spec in ops.all_ops())
    assert all(f"`{name}`" in pages["faults.md"] for name in catalogue())
    assert all(f"## urc {module.__name__.rsplit('.', 1)[1]}\n" in pages["cli.md"] for module in SUBCOMMANDS)
    assert all(f"`{command.id}`" in pages["keys.md"] for command in COMMANDS)
    assert "| 2 | bad input" in pages["exit-codes.md"]
