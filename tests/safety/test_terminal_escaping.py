"""Text from a file never drives the terminal: a scenario's name, description and ids
reach every view (``urc run``, ``show``, ``why``, ``diff``, ``svg``, ``plot`` and the
TUI) with control characters escaped visibly and rich or Textual markup shown as
typed, and an SVG stays valid XML whatever the file held."""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from urc_util import urc
from workbench.model.scenarios.errors import printable

ROOT = Path(__file__).resolve().parents[2]
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # \n is a line break
# TOML escapes: a screen clear, an OSC window title, a NUL, a C1 CSI, a bidi override, and markup
NAME = (r"x\u001b[2J\u001b]0;pwned\u0007\u0000 [bold red]x[/] [link=file:///etc/passwd]L[/link] "
        r"[@click=app.quit]q\u009b\u202e")
SHOWN = (r"x\x1b[2J\x1b]0;pwned\x07\x00", "[bold red]x[/]", "[link=file:///etc/passwd]L[/link]", r"\x9b\u202e")
SESSION, REQUEST = r"s\u001b]0;pwned\u0007[bold]", r"r\u001b[2J[link=x]\u0000"
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")


@pytest.fixture
def hostile(tmp_path, monkeypatch) -> str:
    """scenarios/smoke.toml with a hostile name and a hostile description of two paragraphs."""
    monkeypatch.chdir(tmp_path)
    text = (ROOT / "scenarios" / "smoke.toml").read_text()
    text = text.replace('name = "smoke"', f'name = "{NAME}"')
    text = text.replace('description = "A minimal Full-only run"', f'description = "first line\\n\\n{NAME}"')
    Path("hostile.toml").write_text(text)
    return "hostile.toml"


@pytest.fixture
def hostile_ids(tmp_path, monkeypatch) -> str:
    """The sessions tour with a hostile session id and request id."""
    monkeypatch.chdir(tmp_path)
    text = (ROOT / "scenarios" / "tour_sessions.toml").read_text()
    Path("ids.toml").write_text(text.replace('"s1"', f'"{SESSION}"').replace('"r1"', f'"{REQUEST}"'))
    return "ids.toml"


def assert_escaped(text: str, *shown: str) -> None:
    assert not RAW.search(text), repr(RAW.search(text).group())
    for part in shown:
        assert part in text, part


def test_printable_escapes_every_control_character_and_keeps_lines_only_when_asked():
    assert printable("a\x1b[2J\x00\x07\x7f\x85\x9b\u202e\u2066\tb") == r"a\x1b[2J\x00\x07\x7f\x85\x9b\u202e\u2066\tb"
    assert printable("one\ntwo\r\x1b") == r"one\ntwo\r\x1b"
    assert printable("one\ntwo\r\x1b", lines=True) == "one\ntwo" + r"\r\x1b"
    assert printable("smoke — ünïcode [1 2 3]") == "smoke — ünïcode [1 2 3]"


def test_run_reports_the_name_escaped(capsys, hostile):
    rc, out, err = urc(capsys, "run", hostile)
    assert rc == 0, err
    assert out.startswith("PASS hostile.toml")
    assert_escaped(out + err, *SHOWN)


def test_show_walks_the_name_and_the_description_escaped(capsys, hostile):
    rc, out, err = urc(capsys, "show", "--walk", hostile)
    assert rc == 0, err
    assert_escaped(out + err, *SHOWN)
    assert "first line\n" in out  # a description keeps its line breaks, and only them
    rc, out, err = urc(capsys, "show", hostile, "--step", "2")
    assert rc == 0 and not RAW.search(out + err)


def test_ids_from_the_file_are_escaped_in_show_why_and_diff(capsys, hostile_ids):
    session, request = r"s\x1b]0;pwned\x07[bold]", r"r\x1b[2J[link=x]\x00"
    rc, out, err = urc(capsys, "show", "--walk", hostile_ids)
    assert_escaped(out + err, session, request)
    rc, out, err = urc(capsys, "why", hostile_ids, "--step", "5", "--request", "r\x1b[2J[link=x]\x00")
    assert rc == 0, err
    assert_escaped(out + err, request)
    rc, out, err = urc(capsys, "why", hostile_ids, "--step", "7", "--session", "s\x1b]0;pwned\x07[bold]")
    assert rc == 0, err
    assert_escaped(out + err, session)
    rc, out, err = urc(capsys, "diff", hostile_ids, "--from", "3", "--to", "4")
    assert rc == 0, err
    assert_escaped(out + err, request)


@needs_dot
@pytest.mark.parametrize("fixture, step", [("hostile", 3), ("hostile_ids", 7)])
def test_the_svg_is_valid_xml_with_the_text_escaped(capsys, request, fixture, step):
    path = request.getfixturevalue(fixture)
    rc, out, err = urc(capsys, "svg", path, "--step", str(step), "--diff", str(step - 1), "-o", "out.svg")
    assert rc == 0, err
    text = Path("out.svg").read_text(encoding="utf-8")
    ET.fromstring(text)  # XML 1.0 forbids most C0 characters, and &#27; as well
    assert_escaped(text)
    assert (r"x\x1b[2J\x1b]0;pwned\x07\x00" if fixture == "hostile" else r"s\x1b]0;pwned\x07[bold]") in text


@needs_dot
def test_a_name_that_is_an_entity_stays_text_in_the_svg(capsys, hostile):
    Path("entity.toml").write_text(Path(hostile).read_text().replace(NAME, r"a &#27; b \\ c"))
    rc, out, err = urc(capsys, "svg", "entity.toml", "-o", "out.svg")
    assert rc == 0, err
    text = Path("out.svg").read_text(encoding="utf-8")
    ET.fromstring(text)
    assert "a &amp;#27; b \\ c" in text


def test_the_plot_title_is_escaped_and_not_read_as_math(capsys, hostile):
    pytest.importorskip("matplotlib")
    Path("dollar.toml").write_text(Path(hostile).read_text().replace(r"\u0000 ", r"\u0000 $x_{$ "))
    rc, out, err = urc(capsys, "plot", "dollar.toml", "-o", "plot.svg")
    assert rc == 0, err
    text = Path("plot.svg").read_text(encoding="utf-8")
    ET.fromstring(text)
    assert_escaped(text)


def _screen_text(app) -> str:
    """Every line the terminal would be sent, as plain text (the compositor's lines: a
    screenshot splits its text by style)."""
    return "\n".join("".join(segment.text for segment in strip) for strip in app.screen._compositor.render_strips())


@pytest.mark.asyncio
@pytest.mark.parametrize("fixture", ["hostile", "hostile_ids"])
async def test_the_tui_shows_the_text_escaped(request, fixture):
    from workbench.model.scenarios.scenario import load_scenario
    from workbench.tui.app import WorkbenchApp
    from workbench.tui.widgets.step_panel import StepPanel

    scenario = load_scenario(request.getfixturevalue(fixture))
    app = WorkbenchApp([scenario], background=False)
    async with app.run_test(size=(200, 50)) as pilot:  # the markup in the name neither crashes nor applies
        if fixture == "hostile":  # the step panel's title and its text
            assert_escaped(_screen_text(app), r"· x\x1b[2J\x1b]0;pwned\x07\x00 [bold red]x[/]")
            first_line = app.query_one(StepPanel).content.renderables[0]
            assert first_line.plain.startswith(r"x\x1b[2J\x1b]0;pwned\x07\x00 [bold red]x[/]")
        for _ in range(len(scenario.steps)):
            await pilot.press("n")
            await pilot.pause()
            assert_escaped(_screen_text(app))
        await pilot.press("d")  # the diff screen's cells and lines
        await pilot.pause()
        assert_escaped(_screen_text(app))
        assert app.is_running


def test_fuzz_prints_kept_detection_rows_escaped(tmp_path, capsys):
    """``urc fuzz --faults new`` prints rows kept from an earlier detections.json: a file."""
    import json

    from cache.faults import catalogue
    from workbench.cli import main

    rows = [{"fault": name, "flagged": True, "runs": 1, "first_faulty_step": 1, "config": "full\x1b[2J",
             "seed": 0, "flagged_step": 1, "check": "x\x1b]0;pwned\x07", "shrunk_steps": 1,
             "sanity_check_catches": False} for name in catalogue()]
    (tmp_path / "detections.json").write_text(json.dumps(rows))
    assert main(["fuzz", "--faults", "new", "-o", str(tmp_path), "--force", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\\x1b]0;pwned\\x07" in out
    (tmp_path / "detections.json").write_text(json.dumps([{"fault": "f"}]))
    assert main(["fuzz", "--faults", "new", "-o", str(tmp_path), "--force", "--jobs", "1"]) == 2
    assert "no readable detections.json" in capsys.readouterr().err


@pytest.mark.asyncio
async def test_a_stored_steps_op_names_and_kv_events_reach_the_tui_and_the_walk_escaped(tmp_path, capsys):
    """A store's steps are not checked as a scenario's are (a scenario's ops and field
    names are): a crafted step's op, field and result names and KV event line carry
    ESC, and the step list, the step panel and ``urc show --walk`` show them escaped."""
    import sqlite3

    from workbench.cli import main
    from workbench.model.timeline import store_codec
    from workbench.model.timeline.store_run import run_to_store
    from workbench.model.timeline.stored import open_store
    from workbench.tui.app import WorkbenchApp

    scenario = tmp_path / "kv.toml"
    scenario.write_text('schema = 1\n[scenario]\nname = "k"\n[config]\ncomponents = ["full"]\nkv_size = 64\n'
                        'enable_kv_cache_events = true\n[[step]]\nop = "insert"\nkey = [1, 2, 3]\n')
    store = tmp_path / "kv.urcdb"
    run_to_store(str(scenario), str(store)).close()
    with sqlite3.connect(store) as db:  # the record: (step row, result, …, KV event lines)
        record = list(store_codec.decode(db.execute("SELECT record FROM steps WHERE idx = 1").fetchone()[0]))
        step = list(record[0])
        step[2], step[3], step[7], step[8], step[9] = "\x1b[31mop\x1b]0;t\x07", {"\x1b[2Jfield": [1, 2, 3]}, {}, [], {}
        record[0], record[1], record[8] = tuple(step), {"\x1b[2Jresult": 0}, ("\x1b]0;event\x07",)
        db.execute("UPDATE steps SET record = ? WHERE idx = 1", (store_codec.encode(tuple(record), compress=False),))
    db.close()
    shown = (r"\x1b[31mop\x1b]0;t\x07", r"\x1b[2Jfield=[1 2 3]")
    assert main(["show", "--walk", str(store)]) in (0, 1)
    assert_escaped(capsys.readouterr().out, *shown, r"\x1b[2Jresult=0", r"kv event: \x1b]0;event\x07")
    app = WorkbenchApp([open_store(str(store))], background=False)
    async with app.run_test(size=(200, 50)) as pilot:
        app.cursor.go(1)
        app.refresh_view()
        await pilot.pause()
        assert_escaped(_screen_text(app), *shown, r"\x1b[2Jresult=0", r"kv event: \x1b]0;event\x07")
