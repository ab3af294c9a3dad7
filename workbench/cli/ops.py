"""``urc ops``: list the scenario ops from the op registry (or the docs' reference tables)."""

from __future__ import annotations


def add_parser(command) -> None:
    listing = command("ops", "list the scenario ops: syntax, results and needs",
                      "Every op a scenario, a live command or the fuzzer can use, from the op registry "
                      "(workbench/model/ops): one line each, or the docs' reference table (docs/reference/ops.md) with --markdown.")
    listing.add_argument("--markdown", action="store_true", help="print the op reference table (docs/reference/ops.md)")
    listing.add_argument("--expect-markdown", action="store_true",
                         help="print the table of the node and request fields a step may expect (docs/reference/ops.md)")


def run(args) -> int:
    from ..model import ops

    if args.markdown:
        print(ops.reference_table())
        return 0
    if args.expect_markdown:
        from ..model.scenarios.node_fields import reference_table

        print(reference_table())
        return 0
    for spec in ops.all_ops():
        needs = f"  (needs {', '.join(spec.needs)})" if spec.needs else ""
        also = f"  (also: {', '.join(spec.aliases)})" if spec.aliases else ""
        print(f"{spec.usage()}\n    {spec.summary}{needs}{also}")
    return 0
