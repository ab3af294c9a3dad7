"""Helpers for the scenario/runner/CLI tests: write small scenario files and call
``workbench.cli.main`` in-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from workbench.cli import main

# Exactly 8 lines: [scenario] is line 3, [config] line 6, components line 7, kv_size
# line 8, so the first [[step]] written straight after it is line 9.
HEADER = """\
schema = 1

[scenario]
name = "t"

[config]
components = ["full"]
kv_size = 64
"""

JSONL_HEADER = {"schema": 1, "scenario": {"name": "t"}, "config": {"components": ["full"], "kv_size": 64}}


def full_header(name: str, **config) -> str:
    """The head of a Full-only scenario text, compact (no blank lines): schema,
    ``[scenario]`` with ``name``, ``[config]`` with ``components = ["full"]`` then each
    ``config`` item as ``key = value``, the value written as given (TOML text or a number)."""
    lines = ["schema = 1", "[scenario]", f"name = {json.dumps(name)}", "[config]", 'components = ["full"]']
    return "\n".join(lines + [f"{key} = {value}" for key, value in config.items()]) + "\n"


def write(name: str, text: str) -> str:
    """Write ``text`` (dedented) to ``name`` in the current directory; return the name."""
    Path(name).write_text(textwrap.dedent(text), encoding="utf-8")
    return name


def toml(name: str, steps: str = "", header: str = HEADER) -> str:
    return write(name, header + textwrap.dedent(steps))


def jsonl(name: str, *records, raw_lines: tuple[str, ...] = (), header=JSONL_HEADER) -> str:
    lines = ([json.dumps(header)] if header is not None else []) + [json.dumps(r) for r in records] + list(raw_lines)
    Path(name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return name


def urc(capsys, *argv: str) -> tuple[int, str, str]:
    """Run ``urc ARGV`` in-process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def run_json(capsys, *files: str, extra: tuple[str, ...] = ()) -> tuple[int, list]:
    rc, out, err = urc(capsys, "run", "--json", *extra, *files)
    assert rc in (0, 1), err
    return rc, json.loads(out)


def assert_invalid(capsys, argv: list[str], where: str, field: str | None = None, says: str | None = None,
                   command: str = "run") -> str:
    """``urc ARGV`` exits 2 with exactly one stderr line ``urc CMD: WHERE: …`` (naming the
    field when given), prints nothing on stdout and no traceback."""
    rc, out, err = urc(capsys, *argv)
    assert rc == 2, (rc, out, err)
    assert "Traceback" not in err and "Traceback" not in out
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"urc {command}: {where}: "), lines[0]
    if field is not None:
        assert f"(field {field!r})" in lines[0], lines[0]
    if says is not None:
        assert says in lines[0], lines[0]
    assert out == ""
    return lines[0]


def main_without_torch(*argvs: list[str]) -> tuple[list[int], bool, str]:
    """Each argv through ``main`` in one fresh interpreter: their exit codes, whether
    torch was imported by the end, and stderr (what is checked before torch loads)."""
    probe = ("import sys\nfrom workbench.cli import main\n"
             f"codes = [main(argv) for argv in {[list(a) for a in argvs]!r}]\n"
             "print(codes, 'torch' in sys.modules)")
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(root)})
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    assert last.endswith((" True", " False")), proc.stdout + proc.stderr
    codes, imported = last.rsplit(" ", 1)
    return json.loads(codes), imported == "True", proc.stderr
