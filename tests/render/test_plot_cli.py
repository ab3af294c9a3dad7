"""``urc plot``: a whole run as charts, written as a file that is never overwritten
without --force, with one-line errors for bad input."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from urc_util import urc

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "scenarios" / "smoke.toml"
LEAK = ROOT / "scenarios" / "fuzz" / "abort-chunked-not-released.toml"  # a request's slot leaks at step 2


def svg_text(path: Path) -> str:
    return "".join(ET.fromstring(path.read_text(encoding="utf-8")).itertext())


def test_it_writes_an_svg_and_refuses_to_overwrite_it_without_force(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = urc(capsys, "plot", str(SMOKE))
    assert rc == 0 and "wrote smoke-plot.svg (5 steps; every check passed)" in err
    first = Path("smoke-plot.svg").read_bytes()
    text = svg_text(Path("smoke-plot.svg"))
    for words in ("full pool (slots)", "available", "hit rate", "tree (count)", "nodes", "every check passed"):
        assert words in text, words
    rc, out, err = urc(capsys, "plot", str(SMOKE))
    assert rc == 2 and "file exists (use --force to overwrite it)" in err and len(err.strip().splitlines()) == 1
    rc, out, err = urc(capsys, "plot", str(SMOKE), "--force")
    assert rc == 0 and Path("smoke-plot.svg").read_bytes() == first  # no date in it: the same run, the same file


def test_the_failing_steps_and_the_change_are_marked(capsys, tmp_path):
    out_file = tmp_path / "leak.svg"
    rc, out, err = urc(capsys, "plot", str(LEAK), "-o", str(out_file), "--changes", "full_unaccounted",
                       "--mark", "op=abort")
    assert rc == 0 and "full_unaccounted changes at step 2 (0 -> 1)" in err
    text = svg_text(out_file)
    assert "failing (first: step 2)" in text and "full_unaccounted changes at 2" in text and "breakpoint" in text
    assert "unaccounted (slots)" in text  # the leaked slot's own chart


def test_series_chooses_what_is_drawn(capsys, tmp_path):
    rc, out, err = urc(capsys, "plot", str(SMOKE), "-o", "-", "--series", "full_evictable", "tree")
    assert rc == 0 and out.startswith("<?xml")
    text = "".join(ET.fromstring(out).itertext())
    assert "evictable" in text and "nodes" in text and "hit rate" not in text and "available" not in text


def test_png_and_pdf_are_written_too(capsys, tmp_path):
    assert urc(capsys, "plot", str(SMOKE), "-o", str(tmp_path / "p.png"))[0] == 0
    assert (tmp_path / "p.png").read_bytes().startswith(b"\x89PNG")
    assert urc(capsys, "plot", str(SMOKE), "-o", str(tmp_path / "p.pdf"))[0] == 0
    assert (tmp_path / "p.pdf").read_bytes().startswith(b"%PDF")


@pytest.mark.parametrize("argv, says", [
    (["missing.toml"], "missing.toml"),
    ([str(SMOKE), "-o", "out.txt"], "write .svg, .png or .pdf"),
    ([str(SMOKE), "--series", "full_avail"], "no series or chart 'full_avail'"),
    ([str(SMOKE), "--changes", "nodes@9"], "--changes must be between 0 and 5"),
    ([str(SMOKE), "--changes", "nodes@x"], "the step after @ must be an int"),
    ([str(SMOKE), "--changes", "bogus"], "no series 'bogus'"),
    ([str(SMOKE), "--window", "3"], "--window only applies with --changes"),
    ([str(SMOKE), "--mark", "frobnicate"], "--mark: cannot read 'frobnicate'"),
    ([str(SMOKE), "-o", str(SMOKE.with_suffix(".svg").parent / "nowhere" / "x.svg")], "does not exist"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, monkeypatch, argv, says):
    monkeypatch.chdir(tmp_path)
    rc, out, err = urc(capsys, "plot", *argv)
    assert rc == 2 and says in err and len(err.strip().splitlines()) == 1, err
    assert not list(tmp_path.iterdir())  # nothing written


def test_every_marked_run_is_drawn_not_only_the_first_200(capsys, tmp_path):
    """300 separate matches marked with --mark: 300 lines on each chart, none dropped silently."""
    steps = "".join(f'[[step]]\nop = "insert"\nkey = [{i}]\n[[step]]\nop = "match"\nkey = [{i}]\n' for i in range(300))
    scenario = tmp_path / "many.toml"
    scenario.write_text(SMOKE.read_text().split("[[step]]")[0] + steps, encoding="utf-8")
    out_file = tmp_path / "many.svg"
    rc, out, err = urc(capsys, "plot", str(scenario), "-o", str(out_file), "--mark", "op=match")
    assert rc == 0, err
    svg = "{http://www.w3.org/2000/svg}"
    groups = [g for g in ET.fromstring(out_file.read_text(encoding="utf-8")).iter(f"{svg}g")
              if (g.get("id") or "").endswith("-breakpoints")]
    assert groups and all(len(list(g.iter(f"{svg}path"))) == 300 for g in groups)
