"""``urc bench --timeline``: what keeping and checking every step costs.

Each part runs in a fresh interpreter so its peak RSS is its own (torch included):
the benchmark workload as a trace (the 2,000-request figure of the timeline issue,
Full and Full+SWA+Mamba), a 20,000-step fuzzer-like random trace, and reads of a
10,000-node tree's timeline (random ``state_after``, stepping, ``diff``, the current
state, the full invariant sweep), the debugger's searches and ``why`` answers on a
10,000-step trace, and N locks taken on one match (lock-heavy: the per-step check's
cost must not grow with the locks held, so ms per step at 1,000 and 10,000 agree).
"""

from __future__ import annotations

import json
import random
import resource
import statistics
import subprocess
import sys
import time

PARTS = {
    "trace-full": ("trace", 2000, ("full",)),
    "trace-full,swa,mamba": ("trace", 2000, ("full", "swa", "mamba")),
    "random-full": ("random", 20000, ("full",)),
    "random-full,swa,mamba": ("random", 20000, ("full", "swa", "mamba")),
    "tree-10k": ("tree", 10000, ("full",)),
    "debugger-random-10k": ("debugger", 10000, ("full", "swa", "mamba")),
    "debugger-trace-10k": ("debugger-trace", 10000, ("full", "swa", "mamba")),
    "locks-1k": ("locks", 1000, ("full", "swa", "mamba")),
    "locks-10k": ("locks", 10000, ("full", "swa", "mamba")),
}


SVG_PARTS = {
    "svg-2k": ("svg", 2000, ("full",)),
    "svg-10k-max500": ("svg", 10000, ("full",)),
}

PLOT_PARTS = {  # urc plot: the benchmark workload at 20,000 requests (80,000 steps), the random trace
    "plot-trace-80k": ("plot", 20000, ("full",)),
    "plot-random-20k": ("plot-random", 20000, ("full", "swa", "mamba")),
}


def timeline_report(requests: int = 2000, parts: dict = PARTS) -> dict:
    """Every part, each in its own interpreter."""
    out = {}
    for name, (kind, size, comps) in parts.items():
        size = requests if kind == "trace" else size
        proc = subprocess.run([sys.executable, "-m", "workbench.bench.timeline", kind, str(size), ",".join(comps)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            out[name] = {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
        else:
            out[name] = json.loads(proc.stdout)
    return out


def _peak_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _run_records(records) -> tuple:
    from ..model.timeline.runner import Runner
    from ..model.scenarios.scenario import scenario_from_records

    records = list(records)
    scenario = scenario_from_records(records[0], records[1:])
    start = time.perf_counter()
    timeline = Runner(scenario).run()
    return timeline, time.perf_counter() - start


def part_trace(requests: int, components: tuple[str, ...]) -> dict:
    """As ``urc run trace.jsonl`` does it: from a file, so the figures are a user's."""
    import tempfile

    from ..model.timeline.runner import Runner
    from ..model.scenarios.scenario import load_scenario
    from ..model.scenarios.workload import write_trace

    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/trace.jsonl"
        with open(path, "w", encoding="utf-8") as stream:
            write_trace(stream, requests, 0, components)
        start = time.perf_counter()  # loading and checking the file counts: it is part of a user's wait
        timeline = Runner(load_scenario(path)).run()
        seconds = time.perf_counter() - start
    return {"steps": len(timeline), "seconds": round(seconds, 2), "ms_per_step": round(seconds / len(timeline) * 1e3, 3),
            "passed": timeline.passed, "peak_rss_mb": _peak_mb()}


def part_random(steps: int, components: tuple[str, ...]) -> dict:
    from ..model.scenarios.workload import random_records

    timeline, seconds = _run_records(random_records(steps, 0, components))
    return {"steps": len(timeline), "ms_per_step": round(seconds / len(timeline) * 1e3, 3), "passed": timeline.passed,
            "peak_rss_mb": _peak_mb()}


def part_tree(nodes: int, components: tuple[str, ...]) -> dict:
    """A tree of ``nodes`` leaves under the root, then a few hundred ops on it."""
    from ..model.ops.keys import INSERT, MATCH
    from cache import check_invariants

    rng = random.Random(0)
    header = {"schema": 1, "scenario": {"name": "tree"},
              "config": {"components": list(components), "kv_size": (nodes + 400) * 4}}
    steps = [INSERT.step(key=[i, i + 1, i + 2]) for i in range(1, 3 * nodes, 3)]
    steps += [MATCH.step(key=[rng.randrange(1, 3 * nodes), 7], as_=f"m{i}") for i in range(300)]
    timeline, seconds = _run_records([header, *steps])
    n = len(timeline)
    ms = lambda fn: _timed_ms(fn)  # noqa: E731
    store = timeline.store
    random_reads = [ms(lambda i=i: timeline.state_after(i).node(store.shape.root_id)) for i in
                    (rng.randrange(n - 300, n) for _ in range(20))]
    store._cache.clear()
    base = n - 200
    timeline.state_after(base)
    steps_fwd = [ms(lambda i=i: timeline.state_after(i).node(store.shape.root_id)) for i in range(base + 1, base + 21)]
    diffs = [ms(lambda i=i: timeline.diff(i, i + 1)) for i in range(base, base + 20)]
    store._cache.clear()
    current = ms(lambda: timeline.state_after(n))
    from ..model.timeline.runner import Runner  # the sweep on the same tree, rebuilt
    from ..model.scenarios.scenario import scenario_from_records

    runner = Runner(scenario_from_records(header, steps))
    runner.run()
    sweep = min(_timed_ms(lambda: check_invariants(runner.cache)) for _ in range(5))
    return {
        "nodes": len(store.current) - 1, "steps": n, "run_seconds": round(seconds, 2),
        "state_after_random_ms": _summary(random_reads), "next_step_ms": _summary(steps_fwd),
        "diff_adjacent_ms": _summary(diffs), "current_state_ms": round(current, 3),
        "full_sweep_ms": round(sweep, 2), "peak_rss_mb": _peak_mb(),
    }


def part_debugger(steps: int, components: tuple[str, ...], workload: str = "random") -> dict:
    """The TUI's debugger on a ``steps``-step trace (fuzzer-like, or the benchmark
    workload: ``steps / 4`` requests on a large tree): reverse-continue from the last
    step to the first with conditions that never hold (the worst case: every step is
    read), forward continue likewise, and ``why`` answers (node and match)."""
    from ..model.ops.keys import MATCH
    from ..model.debugging.breakpoints import parse_condition
    from ..model.timeline.search import search
    from ..model.debugging.why import why_match, why_node
    from ..model.scenarios.workload import random_records, trace_records

    records = random_records(steps, 0, components) if workload == "random" else trace_records(steps // 4, 0, components)
    timeline, _ = _run_records(records)
    n = len(timeline)
    never = [parse_condition(t, components) for t in
             ("event=recover component=mamba", "node=99999999", "violation", "failed", "full_available<0")]
    reverse = _timed_ms(lambda: search(timeline, never, n, forward=False))
    forward = _timed_ms(lambda: search(timeline, never, 0, forward=True))
    rng = random.Random(0)
    final = timeline.state_after(n)
    nodes = [node for node in final.records if node != final.root_id]
    first_why = _timed_ms(lambda: why_node(timeline, n, nodes[0]))  # builds the node -> steps index
    node_whys = [_timed_ms(lambda node=node: why_node(timeline, n, node)) for node in rng.sample(nodes, min(20, len(nodes)))]
    matches = [r.index for r in timeline.records if r.step.op == MATCH.name]
    match_whys = [_timed_ms(lambda i=i: why_match(timeline, i)) for i in rng.sample(matches, min(20, len(matches)))]
    return {"steps": n, "nodes": len(nodes), "reverse_continue_all_ms": round(reverse, 1),
            "continue_all_ms": round(forward, 1), "why_node_first_ms": round(first_why, 1),
            "why_node_ms": _summary(node_whys), "why_match_ms": _summary(match_whys), "peak_rss_mb": _peak_mb()}


def part_locks(locks: int, components: tuple[str, ...]) -> dict:
    """``locks`` locks on one match of a 32-token key (window 8), run and checked as
    ``urc run`` does; then the per-step check of the last lock alone, best of 20."""
    from ..model.ops.keys import INSERT, MATCH
    from ..model.ops.locks import LOCK
    from ..model.timeline.runner import Runner
    from ..model.scenarios.scenario import scenario_from_records
    from cache import check_invariants

    header = {"schema": 1, "scenario": {"name": f"locks{locks}"},
              "config": {"components": list(components), "kv_size": 256, "sliding_window": 8,
                         "swa_kv_size": 128, "mamba_size": 16}}
    key = list(range(1, 33))
    steps = [INSERT.step(key=key), MATCH.step(key=key, as_="m")]
    steps += [LOCK.step(match="m", as_=f"l{i}") for i in range(locks)]
    start = time.perf_counter()
    runner = Runner(scenario_from_records(header, steps))
    timeline = runner.run()
    seconds = time.perf_counter() - start
    cache = runner.cache
    touched = {cache.tree.root.id, *(n for n in cache.tree.nodes if n != cache.tree.root.id)}
    check = min(_timed_ms(lambda: check_invariants(cache, touched=touched)) for _ in range(20))
    return {"locks": len(cache.tree.live_receipts), "steps": len(timeline), "seconds": round(seconds, 2),
            "ms_per_step": round(seconds / len(timeline) * 1e3, 3), "check_ms_per_step": round(check, 3),
            "passed": timeline.passed}


def part_svg(nodes: int, components: tuple[str, ...]) -> dict:
    """``urc svg`` of a tree of ``nodes`` distinct branches: all of them at 2,000, 500
    of them (``--max-nodes 500``) at 10,000; timed from the timeline to SVG text."""
    from ..model.ops.keys import INSERT
    from ..model.timeline.runner import Runner
    from ..model.scenarios.scenario import scenario_from_records
    from ..render.dot import render_svg
    from ..render.picture import picture

    header = {"schema": 1, "scenario": {"name": "svg"},
              "config": {"components": list(components), "kv_size": (nodes + 10) * 4}}
    steps = [INSERT.step(key=[i, i + 1, i + 2]) for i in range(1, 3 * nodes, 3)]
    timeline = Runner(scenario_from_records(header, steps)).run()
    max_nodes = nodes + 10 if nodes <= 2000 else 500
    start = time.perf_counter()
    dot = picture(timeline, len(timeline), len(timeline) - 1, max_nodes)
    built = time.perf_counter()
    svg = render_svg(dot)
    done = time.perf_counter()
    return {"nodes": nodes, "max_nodes": max_nodes, "seconds": round(done - start, 2),
            "model_and_dot_seconds": round(built - start, 2), "graphviz_seconds": round(done - built, 2),
            "svg_mb": round(len(svg) / 2**20, 1)}


def part_plot(size: int, components: tuple[str, ...], workload: str = "trace") -> dict:
    """``urc plot`` after the run: the series read from the timeline, then the first
    picture (SVG, every chart) — the import of matplotlib timed apart; and the points a
    1,200-column chart reads again for a zoomed window. The workload trace at ``size``
    requests (4 steps each), or the random trace of ``size`` steps."""
    from ..model.scenarios.workload import random_records, trace_records
    from ..model.timeline.series import RunSeries

    records = trace_records(size, 0, components) if workload == "trace" else random_records(size, 0, components)
    timeline, run_seconds = _run_records(records)
    start = time.perf_counter()
    series = RunSeries(timeline)
    read = time.perf_counter()
    from ..render.plot import draw_run, figure_bytes

    imported = time.perf_counter()
    svg = figure_bytes(draw_run(series))
    drawn = time.perf_counter()
    n = series.steps
    zoom = _timed_ms(lambda: [series.points(name, 1200, n // 3, n // 3 + n // 10) for name in series.names()])
    return {"steps": n, "run_seconds": round(run_seconds, 1), "series_seconds": round(read - start, 3),
            "import_matplotlib_seconds": round(imported - read, 2), "first_draw_seconds": round(drawn - imported, 2),
            "series_and_draw_seconds": round(drawn - start, 2), "svg_kb": len(svg) // 1024,
            "zoom_points_ms": round(zoom, 2), "series": len(series.names()), "peak_rss_mb": _peak_mb()}


def _timed_ms(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def _summary(samples: list[float]) -> dict:
    return {"mean": round(statistics.fmean(samples), 3), "max": round(max(samples), 3)}


if __name__ == "__main__":
    kind, size, comps = sys.argv[1], int(sys.argv[2]), tuple(sys.argv[3].split(","))
    part = {"trace": part_trace, "random": part_random, "tree": part_tree, "svg": part_svg, "locks": part_locks,
            "debugger": part_debugger,
            "debugger-trace": lambda n, comps: part_debugger(n, comps, "trace"), "plot": part_plot,
            "plot-random": lambda n, comps: part_plot(n, comps, "random")}[kind]
    print(json.dumps(part(size, comps)))
