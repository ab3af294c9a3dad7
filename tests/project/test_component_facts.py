"""The workbench decides by what a component's folder declares, never by its name: a
component that declares a window, states or SGLang's support is treated as such, and no
workbench code compares anything with a component name."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from cache.components import COMPONENT_REGISTRY
from workbench.cli.common import component_sets
from workbench.model.debugging.why_text import _amount, _name, _noun, stays_below
from workbench.model.fuzzing.config import FuzzConfig
from workbench.model.ops.spec import BASE, has_window, in_sglang, sglang_components, stateful, windowed

ROOT = Path(__file__).resolve().parents[2]

# A component registered at run time: the module its class lives in declares its facts.
RING_MODULE = '''
DISPLAY_NAME = "Ring"
NOUN = "ring KV"
UNIT = ("cell", "cells")
HAS_WINDOW = True
IN_SGLANG = True


class RingComponent:
    name = "ring"
'''
PLAIN_MODULE = '''
class PlainComponent:
    name = "plain"
'''


@pytest.fixture
def registered(tmp_path, monkeypatch):
    """``ring`` (declaring a window and SGLang's support) and ``plain`` (declaring
    nothing), registered by path and forgotten afterwards."""
    (tmp_path / "ring_part.py").write_text(RING_MODULE)
    (tmp_path / "plain_part.py").write_text(PLAIN_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    COMPONENT_REGISTRY.register("ring", "ring_part:RingComponent")
    COMPONENT_REGISTRY.register("plain", "plain_part:PlainComponent")
    yield
    COMPONENT_REGISTRY.unregister("ring")
    COMPONENT_REGISTRY.unregister("plain")
    for module in ("ring_part", "plain_part"):
        sys.modules.pop(module, None)


def test_the_registry_reads_what_a_folder_declares_or_the_default():
    assert COMPONENT_REGISTRY.declared("swa", "HAS_WINDOW") is True
    assert COMPONENT_REGISTRY.declared("full", "HAS_WINDOW", "none") == "none"
    assert COMPONENT_REGISTRY.declaring("IN_SGLANG") == ("full", "swa", "mamba")
    assert COMPONENT_REGISTRY.declaring("BASE") == (BASE,) == ("full",)


def test_a_component_registered_with_a_window_is_where_windowed_components_are_listed(registered):
    assert COMPONENT_REGISTRY.declared("plain", "HAS_WINDOW", "none") == "none"
    assert has_window("ring") and not has_window("plain")
    assert windowed((BASE, "plain", "ring")) == "ring"
    assert stateful((BASE, "ring")) is None
    config = FuzzConfig((BASE, "ring"), sliding_window=8)
    assert config.scenario_config()["sliding_window"] == 8  # sized by its window, as SWA is
    assert config.label().startswith("Full+Ring p1 w8")
    assert "sliding_window" not in FuzzConfig((BASE, "plain")).scenario_config()


def test_why_names_and_counts_a_component_by_its_facts(registered):
    assert (_name("ring"), _noun("ring"), _amount("ring", 2)) == ("Ring", "ring KV", "2 cells")
    assert (_name("plain"), _noun("plain"), _amount("plain", 1)) == ("plain", "plain data", "1 unit")
    assert stays_below("mamba") and not stays_below("ring")


def test_the_component_sets_offered_follow_what_sglang_has(registered):
    assert "full,ring" in component_sets() and "full,swa,mamba,ring" in component_sets()
    assert "full,plain" not in component_sets()


def test_the_sidecar_is_left_out_of_sglang_comparisons():
    from workbench.bridge.sglang_env import BridgeError
    from workbench.bridge.sglang_side import SGLangSide

    assert not in_sglang("sidecar") and "sidecar" not in sglang_components()
    assert all("sidecar" not in s.split(",") for s in component_sets())
    with pytest.raises(BridgeError, match="no 'sidecar' component"):
        SGLangSide({"components": [BASE, "sidecar"], "kv_size": 64})  # refused before SGLang is imported


# ---- no workbench code compares with a component name --------------------------------------------
# (path, line text) of comparisons that must name a component; empty: none does
ALLOWED: set[tuple[str, str]] = set()


def name_comparisons(source: str, names) -> list[int]:
    """Lines comparing anything (==, !=, in, not in, is) with a component name literal,
    alone or in a tuple, list or set."""
    def literal_names(node) -> bool:
        items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        return any(isinstance(i, ast.Constant) and i.value in names for i in items)

    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Compare) and any(map(literal_names, [node.left, *node.comparators]))]


def test_the_comparison_finder_finds_them():
    names = {"swa", "full"}
    source = 'a = "swa" in comps\nb = c == "full"\nd = e in ("kv", "full")\nf = {"swa": 1}\ng = h == BASE\n'
    assert name_comparisons(source, names) == [1, 2, 3]


def test_no_workbench_code_compares_with_a_component_name():
    names = set(COMPONENT_REGISTRY)
    found = []
    for path in sorted((ROOT / "workbench").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        relative = str(path.relative_to(ROOT))
        found += [f"{relative}:{n}: {lines[n - 1].strip()}" for n in name_comparisons(source, names)
                  if (relative, lines[n - 1].strip()) not in ALLOWED]
    assert found == []
