"""Every shell example in the docs and the README that runs ``urc`` is run here, so the
docs cannot drift from the tool. A fenced ``bash`` or ``console`` block is one example:
its lines that start with ``urc `` (or ``$ urc ``) run in order, in-process, in a fresh
directory, and each must exit 0. The examples before it on the same page run first, in
the same directory (a page is a story: the tutorial records a trace, then opens it). A comment on the line before the fence says otherwise:
``<!-- doc-test: exit N -->`` (each command exits N) or ``<!-- doc-test: skip (why) -->``."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from urc_util import urc

ROOT = Path(__file__).resolve().parents[2]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(bash|console|sh|shell)\n(.*?)^```", re.M | re.S)
MARK = re.compile(r"<!-- doc-test: (skip \((?P<why>[^)]+)\)|exit (?P<code>\d+)) -->\s*$")


def examples() -> list:
    found = []
    for path in FILES:
        text = path.read_text(encoding="utf-8")
        earlier: list = []
        for fence in FENCE.finditer(text):
            commands = [line.removeprefix("$ ") for line in fence.group(2).splitlines()
                        if line.startswith(("urc ", "$ urc "))]
            if not commands:
                continue
            line = text.count("\n", 0, fence.start()) + 1
            before = text[:fence.start()].rstrip("\n").rsplit("\n", 1)[-1]
            mark = MARK.search(before)
            marks = []
            if mark and mark.group("why"):
                marks.append(pytest.mark.skip(reason=mark.group("why")))
            code = int(mark.group("code")) if mark and mark.group("code") else 0
            found.append(pytest.param(list(earlier), commands, code, id=f"{path.relative_to(ROOT)}:{line}",
                                      marks=marks))
            if not marks:
                earlier.append((commands, code))
    return found


EXAMPLES = examples()


def test_the_docs_have_urc_examples_and_skip_few():
    skipped = [e for e in EXAMPLES if e.marks]
    assert len(EXAMPLES) >= 10 and len(skipped) <= 6, [e.id for e in skipped]


@pytest.mark.parametrize("earlier, commands, code", EXAMPLES)
def test_the_example_runs(earlier, commands, code, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for before, _ in earlier:  # checked in their own tests: here they only set the scene
        for command in before:
            urc(capsys, *shlex.split(command, comments=True)[1:])
    for command in commands:
        argv = shlex.split(command, comments=True)[1:]
        rc, out, err = urc(capsys, *argv)
        assert rc == code, f"{command}: exit {rc}\n{err[-2000:]}"
