#!/usr/bin/env python3
"""Request-heavy random sequences run on ours and on SGLang 0.5.23 in lockstep.

The fuzzer's generator draws the steps (every op it knows, request ops three times as
often as the rest), ``urc run --against sglang``'s differential runs them, and the
table says, per component set and page size, how many sequences and ops agreed, how
many runs stopped where SGLang asserts (ours refuses there), and the first divergence.

    PYTHONPATH=$PWD <python with sglang 0.5.23> tools/differential_requests.py \
        [--seeds 8] [--steps 120] [--pages 1,4] [--hicache write_through] [--sessions]
        [--option NAME=VALUE …] [--sweep-options]

``--sweep-options`` runs every option set of workbench/model/fuzzing/options.py (each
eviction policy, EAGLE, the Mamba and SWA options) on the component sets and pages it
fits, one table row per option set, component set and page.

Exit 1 when any sequence diverges.
"""

from __future__ import annotations

import argparse
import sys

REQUEST_OPS = frozenset({"req_prefill", "req_extend", "req_decode", "checkpoint", "release",
                         "retract", "restore", "abort",
                         "session_open", "session_release", "session_reap", "stream_turn"})  # drawn with --sessions
COMPONENT_SETS = (("full",), ("full", "swa"), ("full", "mamba"), ("full", "swa", "mamba"))


def request_heavy_steps(config, seed: int, count: int) -> list[dict]:
    from workbench.model import ops
    from workbench.model.fuzzing.fuzz import OpGenerator

    class RequestHeavy(OpGenerator):
        def next_step(self) -> dict:
            self.count += 1
            rules = sorted(((spec, rule) for spec in ops.all_ops() for rule in spec.fuzz), key=lambda sr: sr[1].rank)
            weights = [rule.weight(self) * (3 if spec.name in REQUEST_OPS else 1) for spec, rule in rules]
            return self.rng.choices(rules, weights)[0][1].make(self)

    generator = RequestHeavy(config, seed)
    return [generator.next_step() for _ in range(count)]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--pages", default="1,4")
    parser.add_argument("--mamba-size", type=int, default=12, help="state slots: room for a few requests (3 each at page > 1)")
    parser.add_argument("--hicache", default=None, help="a write policy: the host tier on too")
    parser.add_argument("--sessions", action="store_true", help="the session radix cache on, session ops drawn")
    parser.add_argument("--option", action="append", default=[], metavar="NAME=VALUE", help="a model option (TOML value)")
    parser.add_argument("--sweep-options", action="store_true", help="every option set the fuzzer knows, in turn")
    parser.add_argument("--keep", default=None, help="a folder: each diverging sequence is written there (JSONL)")
    args = parser.parse_args(argv)

    from workbench.bridge.differential import run_against
    from workbench.cli.fuzz import parse_options
    from workbench.model.fuzzing.config import FuzzConfig, frozen, shown_value
    from workbench.model.fuzzing.options import OPTION_SETS
    from workbench.model.scenarios.scenario import scenario_from_records

    given = parse_options(args.option)
    pages = [int(p) for p in args.pages.split(",")]
    if args.sweep_options:
        runs = [(components, page, {**dict(row.options), **given}) for row in OPTION_SETS
                for components in COMPONENT_SETS if row.fits(components) for page in row.pages if page in pages]
    else:
        runs = [(components, page, given) for components in COMPONENT_SETS for page in pages]
    total_runs = total_ops = total_asserts = diverged = 0
    print(f"{'components':<18} {'page':>4} {'runs':>5} {'ops run':>8} {'asserts':>8}  first divergence")
    for components, page, options in runs:
        config = FuzzConfig(components=components, page_size=page, hicache=args.hicache, mamba_size=args.mamba_size,
                            sessions=args.sessions).with_options(options)
        header = {"schema": 1, "scenario": {"name": "requests"}, "config": config.scenario_config()}
        ops_run = asserts = 0
        first = ""
        for seed in range(args.seeds):
            steps = request_heavy_steps(config, seed, args.steps)
            report = run_against(scenario_from_records(header, steps, f"seed {seed}"))
            ops_run += report.run
            asserts += report.stopped_at is not None
            if not report.agrees and args.keep:
                import json
                from pathlib import Path

                out = Path(args.keep) / f"{'-'.join(components)}-p{page}-s{seed}.jsonl"
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text("".join(json.dumps(r) + "\n" for r in [header, *steps]))
            if not report.agrees and not first:
                d = report.divergence
                first = f"seed {seed} step {d.step} ({d.op}): {d.difference.field}"
                diverged += 1
        total_runs += args.seeds
        total_ops += ops_run
        total_asserts += asserts
        shown = ",".join(components) + "".join(f" {k}={shown_value(frozen(v))}" for k, v in sorted(options.items()))
        print(f"{shown:<18} {page:>4} {args.seeds:>5} {ops_run:>8} {asserts:>8}  {first or '-'}")
    print(f"{total_runs} sequences, {total_ops} ops run on both sides, {total_asserts} stopped where SGLang asserts, "
          f"{diverged} configuration(s) diverged")
    return 1 if diverged else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
