"""``urc shrink``: any failing or diverging run cut down to a minimal scenario file."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from ..model.scenarios.errors import printable, shown_name
from ..model.scenarios.scenario import ScenarioError
from .common import EXIT_CHECK_FAILED, EXIT_INTERRUPTED, EXIT_OK, STORE_SUFFIX, STORED_HELP, load_one

DEFAULT_BUDGET = 300.0


def add_parser(command) -> None:
    shrink = command("shrink", "cut a failing or diverging run down to a minimal scenario that fails the same way",
                     "Find the first failed check of FILE (a scenario, a JSONL trace or recording, or a stored run), "
                     "the first step where a --until condition holds, or with --against sglang the first divergence "
                     "from SGLang 0.5.23; drop the steps after it, then shrink the rest as the fuzzer shrinks its "
                     "findings (chunks of steps with the steps that use their names, single steps, shorter keys, "
                     "smaller amounts, renumbered names and tokens) while each candidate, run as urc run runs it, "
                     "still does the same. The result keeps FILE's config and says above each step which line of "
                     "FILE it came from. Ctrl-C writes the best found so far.")
    shrink.add_argument("file", metavar="FILE", help=STORED_HELP)
    shrink.add_argument("-o", "--output", metavar="OUT.toml", default=None,
                        help="where to write the shrunk scenario (default: FILE's name with -shrunk.toml, here)")
    shrink.add_argument("--until", action="append", default=[], metavar="COND",
                        help="keep this condition instead of the first failure (urc run --until's and the TUI's "
                             "breakpoint grammar; repeatable: any of them)")
    shrink.add_argument("--against", choices=("sglang",), default=None,
                        help="keep the first divergence from SGLang 0.5.23 (needs SGLang 0.5.23, CPU only: make bridge-setup)")
    shrink.add_argument("--budget", type=float, default=DEFAULT_BUDGET, metavar="SEC",
                        help=f"stop shrinking after this many seconds and write the best so far "
                             f"(default {DEFAULT_BUDGET:.0f})")
    shrink.add_argument("--test", metavar="OUT.py", default=None,
                        help="also write the result as a pytest test (as the TUI's t writes one, keeping its checks)")
    shrink.add_argument("--force", action="store_true", help="write over existing output files")
    shrink.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(args) -> int:
    from ..model.scenarios.outputs import check_output

    if args.until and args.against:
        raise ScenarioError("--until and --against keep different things: give one")
    if not args.budget > 0:
        raise ScenarioError(f"--budget must be a positive number of seconds (got {args.budget:g})")
    stem = "stdin" if args.file == "-" else Path(args.file).name.split(".")[0] or "scenario"
    output = args.output or f"{stem}-shrunk.toml"
    check_output(output, [args.file], args.force, "-o")
    if args.test is not None:
        if Path(args.test).resolve() == Path(output).resolve():
            raise ScenarioError(f"--test {shown_name(args.test)}: the same file as -o; give each its own name")
        check_output(args.test, [args.file], args.force, "--test")
    if args.against:
        _require_sglang()
    scenario, timeline_of = load_one(args.file)
    target = _target(args, scenario, timeline_of)
    if target is None:
        return _nothing_to_shrink(args, scenario)
    from ..model.fuzzing.shrink_file import shrink_to_target

    diverges = None
    if args.against:
        from ..bridge.differential_fuzz import first_divergence as diverges
    with _progress(target.step) as on_progress:
        outcome = shrink_to_target(scenario, target, args.budget, on_progress, diverges)
    _write(args, scenario, outcome, target, output)
    summary = {"input": scenario.path, "input_steps": len(scenario.steps), "target": target.describe(),
               "target_step": target.step, "steps": len(outcome.steps), "candidates": outcome.runs,
               "seconds": round(outcome.seconds, 1), "interrupted": outcome.interrupted, "output": output,
               "test": args.test, "fails_the_same_way": outcome.fails_the_same_way}
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        stopped = "STOPPED (interrupted), best so far: " if outcome.interrupted else ""
        print(printable(f"{stopped}{scenario.path}: step {target.step} {target.describe()}; shrunk to "
                        f"{len(outcome.steps)} step(s) in {outcome.seconds:.1f} s ({outcome.runs:,} candidates run); "
                        f"wrote {output}" + (f" and {args.test}" if args.test else "")))
        if not outcome.fails_the_same_way:
            print(printable(f"note: as written, {output} fails another check first (its refused ops are marked "
                            "as they were refused when it was shrunk)"))
    return EXIT_INTERRUPTED if outcome.interrupted else EXIT_OK


def _require_sglang() -> None:
    from ..bridge.sglang_env import BridgeError, check_version

    try:
        check_version()
    except BridgeError as exc:
        raise ScenarioError(f"--against sglang: {exc}") from None


def _target(args, scenario, timeline_of):
    from ..model.fuzzing import shrink_file

    if args.until:
        from ..model.debugging.breakpoints import ConditionError, parse_conditions

        try:
            conditions = parse_conditions(args.until, scenario.config["components"],
                                          bool(scenario.config.get("hicache")))
        except ConditionError as exc:
            raise ScenarioError(f"--until: {exc}") from None
        text = " or ".join(args.until)
        target = shrink_file.first_holding(scenario, conditions, text)
        if target is None:
            raise ScenarioError(f"--until {text}: never holds in {len(scenario.steps):,} steps; nothing to shrink",
                                scenario.path)
        return target
    if args.against:
        from ..bridge.differential_fuzz import first_divergence

        found = first_divergence(scenario)
        if found is None:
            return None
        ours = shrink_file.first_violation_before(scenario, found.step)
        if ours is not None:  # no candidate could keep the divergence and pass our checks before it
            raise ScenarioError(f"step {ours[0]}: ours fails invariant {ours[1]} before the divergence at step "
                                f"{found.step}; shrink that failure first (urc shrink without --against)",
                                scenario.path)
        return shrink_file.Target(shrink_file.DIVERGENCE, found.step, found)
    stored = str(args.file).endswith(STORE_SUFFIX)  # already checked: its failing steps are indexed
    return shrink_file.first_check_failed(scenario, timeline_of() if stored else None)


def _nothing_to_shrink(args, scenario) -> int:
    what = "agrees with SGLang 0.5.23" if args.against else "passes every check"
    if args.json:
        print(json.dumps({"input": scenario.path, "input_steps": len(scenario.steps), "target": None}, indent=1))
    else:
        print(printable(f"{scenario.path}: {what} in {len(scenario.steps):,} steps; nothing to shrink"))
    return EXIT_CHECK_FAILED


def _write(args, scenario, outcome, target, output: str) -> None:
    from ..model.fuzzing.shrink_file import shrunk_scenario, with_origins
    from ..model.scenarios.outputs import open_output
    from ..model.scenarios.writer import scenario_toml

    result = shrunk_scenario(scenario, outcome, target)
    text = with_origins(scenario_toml(result), outcome.steps, Path(scenario.path).name)
    with open_output(output, [args.file], args.force, "-o") as stream:
        stream.write(text)
    if args.test is not None:
        from ..model.debugging.regression_test import write_regression_test
        from ..model.timeline.runner import run_scenario

        timeline = run_scenario(result)
        write_regression_test(timeline, len(timeline.records), args.test, args.force, keep_expectations=True)


class _progress:
    """A status line on stderr while shrinking (a terminal only): the best so far,
    the candidates run and the time."""

    def __init__(self, steps: int) -> None:
        self.steps, self.start, self.shown = steps, time.monotonic(), 0.0
        self.live = sys.stderr.isatty()

    def __enter__(self):
        return self.update if self.live else None

    def update(self, best: int, runs: int) -> None:
        now = time.monotonic()
        if now - self.shown >= 0.2:
            self.shown = now
            sys.stderr.write(f"\rshrink: {self.steps:,} steps → best {best:,} · {runs:,} candidates · "
                             f"{now - self.start:.0f} s   ")
            sys.stderr.flush()

    def __exit__(self, *exc) -> None:
        if self.live:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
