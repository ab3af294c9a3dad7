"""The config reference (cache/config/reference.py): it lists every [config] field the
cache accepts, with the cache's own defaults, the docs print it, and every view and
picture opens with the config line made from it."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from cache.components import COMPONENT_REGISTRY
from cache.config.cache_config import CacheConfig
from cache.config.reference import OPTIONS, REQUIRED, component_options, config_line, reference_table
from cache.tiers.hicache_config import HiCacheConfig, StorageConfig

ROOT = Path(__file__).resolve().parents[2]
TOUR_SWA = ROOT / "scenarios" / "tour_swa.toml"
POLICY = {"components": ["full"], "kv_size": 64, "eviction_policy": "lfu"}


def accepted_fields() -> dict[str, object]:
    """Every field name a scenario's [config] can give -> the default the cache uses."""
    fields = {f.name: (REQUIRED if f.name in ("components", "kv_size") else f.default)
              for f in dataclasses.fields(CacheConfig) if f.name != "extra"}
    fields.update({f"hicache.{f.name}": f.default for f in dataclasses.fields(HiCacheConfig) if f.name != "host_sizes"})
    fields["hicache.host_<component>_size"] = None
    fields.update({f"hicache.storage.{f.name}": f.default for f in dataclasses.fields(StorageConfig)})
    for name in COMPONENT_REGISTRY:
        fields.update(COMPONENT_REGISTRY[name].config_fields)
    return fields


def test_every_accepted_field_is_listed_once_and_nothing_else():
    names = [o.name for o in OPTIONS + component_options()]
    assert len(names) == len(set(names))
    assert set(names) == set(accepted_fields())


def test_each_listed_default_is_the_one_the_cache_uses():
    required_somewhere = {"sliding_window", "mamba_size", "sidecar_size"}  # required with their component
    listed = {o.name: o for o in OPTIONS + component_options()}
    for name, default in accepted_fields().items():
        option = listed[name]
        if option.default is REQUIRED:
            assert default in (REQUIRED, None) and (default is REQUIRED or name in required_somewhere), name
        else:
            assert option.default == default or (option.default == () and default == ()), name
        assert option.family and option.meaning and option.shown_default


def test_the_docs_print_the_reference():
    page = (ROOT / "docs" / "reference" / "config.md").read_text(encoding="utf-8")
    assert reference_table() in page, "regenerate it: make docs (python tools/gen_reference.py)"


def test_the_config_line_names_only_the_options_set_away_from_their_default():
    assert config_line(POLICY) == "full · page 1 · eviction_policy=lfu"
    assert config_line({**POLICY, "eviction_policy": "lru"}) == "full · page 1"
    line = config_line({"components": ["full", "swa"], "page_size": 4, "sliding_window": 8, "kv_size": 64,
                        "session_radix_cache": True, "eviction_policy_config": {"protected_threshold": 1}})
    assert line == "full+swa · page 4 · window 8 · session radix cache · eviction_policy_config={protected_threshold=1}"


def test_urc_show_and_the_walk_open_with_the_config_line(capsys):
    from urc_util import urc

    rc, out, _ = urc(capsys, "show", str(TOUR_SWA), "--step", "1")
    assert rc == 0 and out.splitlines()[0] == "config: full+swa · page 1 · window 4"
    rc, out, _ = urc(capsys, "show", "--walk", str(TOUR_SWA))
    assert rc == 0 and "config: full+swa · page 1 · window 4" in out.splitlines()[:3]


def test_a_failed_run_says_which_cache_it_ran_on(tmp_path, capsys):
    from urc_util import urc

    bad = tmp_path / "bad.toml"
    bad.write_text('schema = 1\n[scenario]\nname = "b"\n[config]\ncomponents = ["full"]\nkv_size = 64\n'
                   'eviction_policy = "lfu"\n[[step]]\nop = "insert"\nkey = [1, 2]\nexpect = { prefix_len = 5 }\n')
    rc, out, _ = urc(capsys, "run", str(bad))
    assert rc == 1 and "  config: full · page 1 · eviction_policy=lfu" in out.splitlines()


def test_the_svg_caption_carries_the_config_line():
    from workbench.model.scenarios.scenario import scenario_from_records
    from workbench.model.timeline.runner import Runner
    from workbench.render.picture import picture

    timeline = Runner(scenario_from_records({"schema": 1, "scenario": {"name": "t"}, "config": POLICY},
                                            [{"op": "insert", "key": [1, 2, 3]}])).run()
    assert "full · page 1 · eviction_policy=lfu" in picture(timeline, 1).source


@pytest.mark.asyncio
async def test_the_tui_header_shows_the_chapters_config_line():
    from workbench.model.scenarios.scenario import load_scenario, scenario_from_records
    from workbench.tui.app import WorkbenchApp

    policy = scenario_from_records({"schema": 1, "scenario": {"name": "p"}, "config": POLICY},
                                   [{"op": "insert", "key": [1, 2, 3]}])
    app = WorkbenchApp([load_scenario(TOUR_SWA), policy], background=False)
    async with app.run_test(size=(160, 50)) as pilot:
        assert app.sub_title == "full+swa · page 1 · window 4"
        await pilot.press("]")  # the next chapter
        await pilot.pause()
        assert app.sub_title == "full · page 1 · eviction_policy=lfu"
