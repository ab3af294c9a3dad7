"""``urc bench``: its options and what each mode prints."""

from __future__ import annotations

import json
import sys

from ..model.scenarios.scenario import ScenarioError
from .against import add_against_options, check_against_use
from .common import EXIT_CHECK_FAILED, EXIT_OK, STORE_SUFFIX, component_sets, load_all
from ..model.ops.spec import BASE

DEVICES = ("cpu", "cuda", "auto")


def add_parser(command) -> None:
    bench = command("bench", "time the cache calls (the seeded workload, or a scenario/trace)",
                    "Time only the cache calls of the seeded shared-prompt workload, or of a scenario/trace.")
    bench.add_argument("--trace", metavar="FILE", help="replay this scenario or JSONL trace instead of the workload")
    bench.add_argument("--requests", type=int, default=5000, metavar="N",
                       help="requests in the seeded workload (default 5000)")
    bench.add_argument("--seed", type=int, default=0, metavar="S", help="workload seed (default 0)")
    bench.add_argument("--repeat", type=float, default=0.0, metavar="FRACTION",
                       help="the share of the workload's requests (0 to below 1) that repeat one of the last 64 whole, "
                            "so matches hit past the shared prompts and hybrid locks take their windows (default 0: "
                            "SGLang's bench workload)")
    bench.add_argument("--device", default="cpu", choices=DEVICES,
                       help="where the pools live: cpu (default), cuda, or auto (cuda when present)")
    bench.add_argument("--components", default=BASE, choices=component_sets(), metavar="LIST",
                       help="the cache's components: " + " | ".join(component_sets())
                       + " (default full; SWA window 128, 256 Mamba slots)")
    bench.add_argument("--tree-sizes", default="1000,100000", metavar="N,N",
                       help="node counts for the per-op scaling run, comma-separated (Full only; default 1000,100000)")
    bench.add_argument("--keys", choices=("array", "list"), default=None,
                       help="with --trace or --against: the container a caller's token ids come in, array('q') "
                            "as SGLang's scheduler holds them (default) or a list; SGLang's side always wraps array('q')")
    bench.add_argument("--json", action="store_true", help="print the report as JSON")
    bench.add_argument("--timeline", action="store_true",
                       help="measure the timeline instead: a 2,000-request trace run with every check, a 20,000-step "
                            "random trace, reads of a 10,000-node tree (about a minute)")
    bench.add_argument("--tui", action="store_true",
                       help="measure the TUI instead: first paint, load and key-to-repaint times on the 2,000-request "
                            "trace and a 10,000-node tree, the tour's first frame and first paint (a few minutes)")
    bench.add_argument("--tui-store", metavar="RUN.urcdb",
                       help="with --tui: also measure the workbench on this stored run (urc run --store): first "
                            "paint, c and C to a counter condition and to an event condition, l with two breakpoints, q")
    bench.add_argument("--svg", action="store_true",
                       help="measure SVG export instead: a 2,000-node tree whole, a 10,000-node one with --max-nodes 500")
    bench.add_argument("--plot", action="store_true",
                       help="measure urc plot instead: the series and the first picture of an 80,000-step trace "
                            "(the workload at 20,000 requests) and of the 20,000-step random trace (a few minutes)")
    bench.add_argument("--fuzz", action="store_true",
                       help="fuzz the unfaulted cache at scale instead: --ops per scale config (default 1,000,000: "
                            "hours), every step checked; ops/s and any failure per config")
    bench.add_argument("--fuzz-jobs", action="store_true",
                       help="measure how urc fuzz --jobs scales instead: the same campaign (--ops, default 40,000) "
                            "on one job and on every core, alternating, for Full and Full+SWA+Mamba, beside as many "
                            "separate interpreters at once (the machine's own ceiling)")
    bench.add_argument("--store", action="store_true",
                       help="measure the timeline store instead: the workload as a trace of --steps steps (default "
                            "1,000,000: about half an hour and 8 GB of disk) checked into a store by urc run --store, "
                            "its peak memory, then reopening it and jumping to random steps")
    bench.add_argument("--states", action="store_true",
                       help="measure urc run --json --states instead: the workload trace (--requests, default 2,000: "
                            "8,000 steps) run with --states, the bytes written and the seconds, beside --json alone and "
                            "beside --full-states on its first --steps steps (default 1,000), then state_at jumps")
    bench.add_argument("--listen", action="store_true",
                       help="measure urc listen instead: a publisher in another process streams --events KV events "
                            "(default 1,000,000) as SGLang sends them; events/s decoded, applied and stored, and the "
                            "listener's memory at each tenth of the stream (needs the kv-events extra)")
    bench.add_argument("--events", type=int, metavar="N", help="with --listen: the events streamed (default 1,000,000)")
    bench.add_argument("--shrink", action="store_true",
                       help="time urc shrink cutting a planted fault out of a long trace (--steps: its length, "
                            "default 100,000); with --store, out of the trace checked into a stored run (default "
                            "1,000,000 steps), with the shrink's peak memory")
    bench.add_argument("--steps", type=int, metavar="N",
                       help="with --store: the trace's length (default 1,000,000); with --shrink (default 100,000); "
                            "with --states: the steps --full-states runs (default 1,000)")
    bench.add_argument("--ops", type=int, metavar="N",
                       help="with --fuzz: ops per config (default 1,000,000); with --fuzz-jobs: ops per campaign")
    bench.add_argument("--write-trace", metavar="OUT.jsonl",
                       help="write the workload (--requests, --seed, --components) as a schema-1 trace and stop; "
                            "- writes to stdout")
    bench.add_argument("--force", action="store_true", help="let --write-trace overwrite an existing file")
    add_against_options(bench)


def run(args) -> int:
    check_against_use(args, {"--timeline": args.timeline, "--tui": args.tui, "--svg": args.svg, "--plot": args.plot,
                             "--fuzz": args.fuzz, "--fuzz-jobs": args.fuzz_jobs, "--store": args.store,
                             "--shrink": args.shrink, "--states": args.states, "--listen": args.listen,
                             "--write-trace": bool(args.write_trace), "--device": args.device != "cpu",
                             "--tree-sizes": args.tree_sizes != "1000,100000"})
    if args.requests <= 0:
        raise ScenarioError("--requests must be a positive int")
    if not 0 <= args.repeat < 1:
        raise ScenarioError(f"--repeat must be a fraction from 0 to below 1 (got {args.repeat:g})")
    other_modes = (args.trace, args.timeline, args.tui, args.svg, args.plot, args.fuzz, args.fuzz_jobs, args.store,
                   args.shrink, args.states, args.listen)
    if args.repeat and any(other_modes):
        raise ScenarioError("--repeat shapes the seeded workload (the plain bench, --write-trace, --against): "
                            "leave out --trace and the other modes")
    try:
        sizes = tuple(int(x) for x in args.tree_sizes.split(",") if x.strip())
    except ValueError:
        raise ScenarioError(f"--tree-sizes must be comma-separated ints (got {args.tree_sizes})") from None
    if any(n <= 0 for n in sizes):
        raise ScenarioError("--tree-sizes must be positive")
    from cache.basics.limits import MAX_POOL

    most = (MAX_POOL - 256) // 16 - 2016  # bench/synthetic.py's tree: 16 tokens a leaf, 2,016 more for its samples
    if max(sizes, default=0) > most:
        raise ScenarioError(f"--tree-sizes must be at most {most:,}: the tree's pool of {MAX_POOL:,} tokens is the "
                            "largest the workbench allocates")
    components = tuple(args.components.split(","))
    if args.write_trace:
        from ..model.scenarios.outputs import check_output, open_output

        if args.trace:  # the output may not be the input, and --write-trace writes the workload, not a replay
            check_output(args.write_trace, [args.trace], args.force, "--write-trace")
            raise ScenarioError("--write-trace writes the seeded workload (--requests, --seed, --components): "
                                "leave out --trace")
        from ..model.scenarios.workload import write_trace

        with open_output(args.write_trace, (), args.force, "--write-trace") as stream:
            steps = write_trace(stream, args.requests, args.seed, components, args.repeat)
        if args.write_trace != "-":
            print(f"wrote {steps:,} steps ({args.requests:,} requests) to {args.write_trace}", file=sys.stderr)
        return EXIT_OK
    if args.force:
        raise ScenarioError("--force only applies with --write-trace")
    if args.ops is not None and (args.ops <= 0 or not (args.fuzz or args.fuzz_jobs)):
        raise ScenarioError("--ops must be a positive int" if args.ops <= 0 else "--ops applies to --fuzz and --fuzz-jobs")
    if args.steps is not None and (args.steps <= 0 or not (args.store or args.shrink or args.states)):
        raise ScenarioError("--steps must be a positive int" if args.steps <= 0
                            else "--steps applies to --store, --shrink and --states")
    if args.states:
        from ..bench.states import states_report

        report = states_report(args.requests if args.requests != 5000 else 2000, args.steps or 1000, components,
                               args.seed, emit=lambda line: None if args.json else print(line, file=sys.stderr,
                                                                                            flush=True))
        print(json.dumps(report, indent=2) if args.json else _timeline_text(report))
        return EXIT_OK
    if args.shrink and args.store:
        from ..bench.shrink import shrink_store_report, shrink_store_text

        report = shrink_store_report(args.steps or 1_000_000, args.seed,
                                     emit=lambda line: None if args.json else print(line, file=sys.stderr, flush=True))
        print(json.dumps(report, indent=2) if args.json else shrink_store_text(report))
        return EXIT_OK if "error" not in report else EXIT_CHECK_FAILED
    if args.events is not None and (args.events <= 0 or not args.listen):
        raise ScenarioError("--events must be a positive int" if args.events <= 0 else "--events applies to --listen")
    if args.listen:
        from ..bench.listen import listen_report
        from ..model.kv_wire import require

        require("urc bench --listen")
        report = listen_report(args.events or 1_000_000,
                               emit=lambda line: None if args.json else print(line, file=sys.stderr, flush=True))
        print(json.dumps(report, indent=2) if args.json else _timeline_text({"listen": report}))
        return EXIT_OK
    if args.shrink:
        from ..bench.shrink import shrink_report, shrink_text

        report = shrink_report(args.steps or 100_000, args.seed,
                               emit=lambda line: None if args.json else print(line, file=sys.stderr, flush=True))
        print(json.dumps(report, indent=2) if args.json else shrink_text(report))
        return EXIT_OK if "error" not in report else EXIT_CHECK_FAILED
    if args.store:
        from ..bench.store import store_report

        report = store_report(args.steps or 1_000_000, components, args.seed,
                              emit=lambda line: None if args.json else print(line, file=sys.stderr, flush=True))
        print(json.dumps(report, indent=2) if args.json else _timeline_text({"store": report}))
        return EXIT_OK
    if args.fuzz_jobs or args.fuzz:
        from ..bench.fuzz import fuzz_report, jobs_report

        report, ops, line = (jobs_report, 40_000, _jobs_line) if args.fuzz_jobs else (fuzz_report, 1_000_000, _fuzz_line)
        rows = report(args.ops or ops, args.seed, emit=lambda row: None if args.json else print(line(row), flush=True))
        if args.json:
            print(json.dumps(rows, indent=1))
        clean = args.fuzz_jobs or all(r.get("finding") is None and "error" not in r for r in rows)
        return EXIT_OK if clean else EXIT_CHECK_FAILED
    if args.tui_store is not None and (not args.tui or not str(args.tui_store).endswith(STORE_SUFFIX)):
        raise ScenarioError("--tui-store applies to --tui" if not args.tui else
                            f"--tui-store takes a stored run ({STORE_SUFFIX}, from urc run --store)")
    if args.tui:
        from ..bench.tui import tui_report

        report = tui_report(store=args.tui_store)
        print(json.dumps(report, indent=2) if args.json else _timeline_text(report))
        return EXIT_OK
    if args.timeline or args.svg or args.plot:
        from ..bench.timeline import PARTS, PLOT_PARTS, SVG_PARTS, timeline_report

        parts = SVG_PARTS if args.svg else PLOT_PARTS if args.plot else PARTS
        report = timeline_report(args.requests if args.requests != 5000 else 2000, parts)
        print(json.dumps(report, indent=2) if args.json else _timeline_text(report))
        return EXIT_OK
    if args.keys is not None and not (args.trace or args.against):
        raise ScenarioError("--keys applies to --trace and --against (the seeded workload builds keys from lists)")
    keys = args.keys or "array"
    trace = load_all([args.trace])[0] if args.trace else None
    if args.against:
        from .against import bench_against

        return bench_against(args, trace)
    _check_device(args.device)
    from ..render.report import make_console

    if trace is not None:
        from ..bench.replay import replay_timed

        report = replay_timed(trace, device=args.device, keys=keys)
        if args.json:
            print(json.dumps(report, indent=1))
        else:
            held = "array('q')" if keys == "array" else "list"
            print(f"caller's path (key from the step's {held} + the call), µs:")
            for op, s in report["ops"].items():
                print(f"  {op:8s} n={s['n']:6d}  mean {s['mean_us']:8.2f}  p50 {s['p50_us']:8.2f}  "
                      f"p99 {s['p99_us']:8.2f}  (call alone: mean {s['call_mean_us']:.2f})")
            print("bare-tree floor (a dict-of-children tree over packed keys: no components, no torch), µs:")
            for op, s in report["floor"].items():
                print(f"  {op:8s} n={s['n']:6d}  mean {s['mean_us']:8.2f}  p50 {s['p50_us']:8.2f}  p99 {s['p99_us']:8.2f}")
        return EXIT_OK
    from ..bench.synthetic import BenchConfig, full_report, print_report

    config = BenchConfig(requests=args.requests, seed=args.seed, device=args.device, components=components,
                         repeat=args.repeat)
    report = full_report(config, sizes if components == (BASE,) else ())
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report, make_console())
    return EXIT_OK


def _fuzz_line(row: dict) -> str:
    if "error" in row:
        return f"{row['config']:22s} error: {row['error']}"
    found = row["finding"] or "no failure"
    return f"{row['config']:22s} {row['ops']:>9,} ops  {row['ops_per_second']:>6,} ops/s  {found}"


def _jobs_line(row: dict) -> str:
    rates = ", ".join(f"{jobs} job{'s' if jobs != '1' else ''} {rate:,} ops/s" for jobs, rate in row["ops_per_second"].items())
    return (f"{row['config']:22s} {row['ops']:>9,} ops  {rates}  ({row['speedup']}x on {row['cores']} cores; "
            f"separate processes: {row['separate_processes_speedup']}x)")


def _timeline_text(report: dict) -> str:
    lines = []
    for part, figures in report.items():
        shown = ", ".join(f"{k} {v}" for k, v in figures.items())
        lines.append(f"{part:24s} {shown}")
    return "\n".join(lines)


def _check_device(device: str) -> None:
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ScenarioError("--device cuda: no CUDA device is available here (use cpu or auto)")


