"""The reference pages of the docs, made from the registries (never written by hand):
every op (the op registry), every field a step may expect, every config field (the
config reference), every fault (the fault catalogue), every command's ``--help`` (the
parser), the TUI's keys (the one binding table) and the exit codes.

``python tools/gen_reference.py`` writes them into docs/reference/ (``make docs`` runs
it first); tests/project/test_docs_reference.py fails when a committed page is not what
this makes, so a registry change shows up as a page to regenerate."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"
MADE_BY = "<!-- made by tools/gen_reference.py from the registries: edit those, then run make docs -->"
HELP_WIDTH = "100"  # argparse wraps --help to $COLUMNS: one width, so the page does not depend on the terminal


def _page(title: str, intro: str, body: str) -> str:
    return f"{MADE_BY}\n# {title}\n\n{intro}\n\n{body.rstrip()}\n"


def ops_page() -> str:
    from workbench.model import ops
    from workbench.model.scenarios.node_fields import reference_table as expect_table

    return _page("Scenario ops",
                 "Every op a scenario step, a live command (`:` in the workbench) or the fuzzer can use, from the "
                 "op registry (`workbench/model/ops/`); `urc ops` lists them in the terminal, `urc ops --markdown` "
                 "prints this table.",
                 ops.reference_table() + "\n\n## What a step may expect\n\n"
                 "The node and request fields a step's `expect` table may name (`urc ops --expect-markdown`).\n\n"
                 + expect_table())


def config_page() -> str:
    from cache.config.reference import reference_table

    return _page("Config fields",
                 "Every field a scenario's `[config]` table accepts, with the cache's own default and the SGLang "
                 "0.5.23 deployment that turns it on (`cache/config/reference.py`). `urc fuzz --option NAME=VALUE` "
                 "takes the same names.",
                 reference_table())


def faults_page() -> str:
    from cache.faults import catalogue

    rows = ["| fault | needs | upstream | the wrong behaviour it brings back |", "|---|---|---|---|"]
    for fault in catalogue().values():
        needs = "+".join(dict.fromkeys(("full", *fault.components)))
        extra = [f"{name}={value}" for name, value in fault.options] + ([f"storage {fault.storage}"] if fault.storage else [])
        extra += ["host tier"] if fault.host_tier and not fault.storage else []
        where = needs + (f" ({', '.join(extra)})" if extra else "") + (" · sessions" if fault.sessions else "")
        rows.append(f"| `{fault.name}` | {where} | {fault.source} | {fault.summary} |")
    return _page("Faults",
                 "The fault catalogue (`cache/faults/`): named switches that bring a real upstream bug back into "
                 "this cache, turned on by `faults = [\"name\"]` in a scenario's `[config]` or "
                 "`urc fuzz --fault NAME`; `urc fuzz --list-faults` prints the same list.",
                 "\n".join(rows))


def cli_page() -> str:
    os.environ["COLUMNS"] = HELP_WIDTH
    from workbench.cli import SUBCOMMANDS, build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(getattr(a, "choices", None), dict)).choices
    parts = ["```text\n" + parser.format_help().rstrip() + "\n```"]
    for name in commands:
        parts.append(f"## urc {name}\n\n```text\n{commands[name].format_help().rstrip()}\n```")
    assert len(commands) == len(SUBCOMMANDS)
    return _page("Command line",
                 "Every `urc` command's `--help`, as the parser prints it (`workbench/cli/`, one module a command).",
                 "\n\n".join(parts))


def keys_page() -> str:
    from workbench.tui.bindings import ANSWERS, COMMANDS, key_label

    def table(commands) -> str:
        rows = ["| key | does | id |", "|---|---|---|"]
        for c in commands:
            keys = ", ".join(f"`{key_label(k.strip())}`" for k in c.key.split(","))
            rows.append(f"| {keys} | {c.category}: {c.description} | `{c.id}` |")
        return "\n".join(rows)

    return _page("Workbench keys",
                 "The keys of `urc tui`, from its one binding table (`workbench/tui/bindings.py`): the same table "
                 "feeds the footer, the command palette (ctrl+p) and the help screen (f1). A keymap file rebinds "
                 "any of them by id: `urc tui --keymap KEYMAP.toml`, one `binding_id = \"key\"` a line.",
                 table(COMMANDS) + "\n\n## In a question dialog\n\n" + table(ANSWERS))


def exit_codes_page() -> str:
    from workbench.cli.common import EXIT_CODES

    rows = ["| code | means |", "|---|---|"]
    for line in EXIT_CODES.splitlines()[1:]:
        code, meaning = line.split(maxsplit=1)
        rows.append(f"| {code} | {meaning} |")
    return _page("Exit codes",
                 "Every `urc` command ends with one of these (`workbench/cli/common.py`); an expected failure is "
                 "one line on stderr, never a traceback.",
                 "\n".join(rows))


PAGES = {"ops.md": ops_page, "config.md": config_page, "faults.md": faults_page, "cli.md": cli_page,
         "keys.md": keys_page, "exit-codes.md": exit_codes_page}


def pages() -> dict[str, str]:
    """Each reference page's file name and text."""
    return {name: make() for name, make in PAGES.items()}


def main() -> int:
    REFERENCE.mkdir(parents=True, exist_ok=True)
    for name, text in pages().items():
        path = REFERENCE / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
