"""``urc bench --tui``: what a user waits for in the workbench, measured through
Textual's Pilot on a headless 160x50 screen (the screen is composed and rendered to
strips as in a terminal; only the write to the terminal is skipped).

Each part (the 2,000-request trace, a 10,000-node tree) runs in a fresh interpreter
so its peak RSS is its own: first paint and full load with the background loader,
then key press to repaint for next / previous / last / first and random jumps.
Targets: first paint <= 3 s, a step <= 50 ms, peak RSS <= 1 GB.

``tour``: the bundled tour as ``urc tui`` opens it, its first frame (the chapter's text,
while its cache is built), its first paint (the steps shown) and ``q``. A stored
run given with ``--tui-store``: its first paint; ``c`` and ``C`` to a counter condition
that never holds (read off the series), to the nearest split and to a request name no
step has (a scan of every record, off the UI thread), each to the answer on screen;
``l`` (the charts) with two breakpoints set, opened twice; and ``q``."""

from __future__ import annotations

import asyncio
import json
import random
import resource
import statistics
import subprocess
import sys
import time

PARTS = ("trace-2k", "tree-10k")
PRESSES = 20
SIZE = (160, 50)


def tui_report(parts: tuple[str, ...] = PARTS + ("tour",), store: str | None = None) -> dict:
    """Every part, each in its own interpreter (``store``: a stored run, one part more)."""
    out = {}
    for name in parts + ((store,) if store else ()):
        argv = [sys.executable, "-m", "workbench.bench.tui", name]
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        failed = {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
        out[name] = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else failed
    return out


def _scenario(part: str):
    """As a user opens it: the trace from a file; the tree (10,000 distinct keys under the
    root, kv_size (10,000 + 10) * 4) from generated records."""
    import tempfile

    from ..model.ops.keys import INSERT
    from ..model.scenarios.scenario import load_scenario, scenario_from_records
    from ..model.scenarios.workload import write_trace

    if part == "trace-2k":
        with tempfile.TemporaryDirectory() as tmp:
            path = f"{tmp}/trace.jsonl"
            with open(path, "w", encoding="utf-8") as stream:
                write_trace(stream, 2000, 0, ("full",))
            return load_scenario(path)
    if part == "tree-10k":
        header = {"schema": 1, "scenario": {"name": "tree-10k"}, "config": {"components": ["full"], "kv_size": 40040}}
        return scenario_from_records(header, [INSERT.step(key=[i, i + 1, i + 2]) for i in range(1, 30000, 3)])
    raise SystemExit(f"unknown part {part!r}; known: {', '.join(PARTS)}")


class _Paints:
    """When the screen finished each repaint, and at which step. Pilot's own wait (three
    idle checks of >= 20 ms sleeps) puts a floor above 50 ms under any press, so the
    time to the first repaint that shows the new step, and to the last one, is kept."""

    def __init__(self, app) -> None:
        self.done: list[tuple[float, int]] = []
        screen, cursor = app.screen, app.cursor
        paint = screen._compositor_refresh

        def timed() -> None:
            paint()
            self.done.append((time.perf_counter(), cursor.step))

        screen._compositor_refresh = timed  # instance attribute: the screen calls self._compositor_refresh()


async def _timed(pilot, paints: _Paints, act, step_before: int) -> tuple[float, float, float]:
    """ms from the press to: after the Pilot pause that follows it; the first repaint
    at a new step; the last repaint (0 when nothing was repainted)."""
    seen = len(paints.done)
    start = time.perf_counter()
    await act()
    await pilot.pause()
    end = time.perf_counter()
    after = paints.done[seen:]
    first = next((t for t, step in after if step != step_before), start)
    return (end - start) * 1e3, (first - start) * 1e3, ((after[-1][0] if after else start) - start) * 1e3


def _jump(app, step: int):
    """A jump as the step list and the go-to dialog make it."""
    async def act() -> None:
        app.cursor.go(step)
        app.refresh_view()
    return act


async def _measure(part: str) -> dict:
    """First paint and load with the background loader, then the presses once loaded.
    The TUI's imports (a user waits for them too) are timed apart: the clock for first
    paint starts at the app's construction."""
    scenario, started = _scenario(part), time.perf_counter()
    from ..tui.app import WorkbenchApp
    from ..tui.widgets.step_list import StepList
    start = time.perf_counter()
    app = WorkbenchApp([scenario], background=True)
    async with app.run_test(size=SIZE) as pilot:
        while not (app.cursor.available > 0 and app.query_one(StepList).option_count > 1):
            await pilot.pause(0.005)
        await pilot.pause()
        first_paint = time.perf_counter() - start
        steps_at_first_paint = app.cursor.available
        await app.workers.wait_for_complete()  # the loader: till the chapter is loaded
        await pilot.pause()
        loaded = time.perf_counter() - start
        assert app.cursor.chapter.loaded
        n, rng, paints = app.cursor.available, random.Random(0), _Paints(app)

        async def timed(act) -> tuple[float, float, float]:
            return await _timed(pilot, paints, (lambda: pilot.press(act)) if isinstance(act, str) else act,
                                app.cursor.step)

        runs: dict[str, list] = {}
        await timed(_jump(app, rng.randrange(n // 2, n - PRESSES)))  # start late: the largest states
        runs["next"] = [await timed("n") for _ in range(PRESSES)]
        runs["previous"] = [await timed("p") for _ in range(PRESSES)]
        runs["unbound_key"] = [await timed("u") for _ in range(PRESSES)]  # Pilot's floor: a key nothing binds
        await timed(_jump(app, 0))
        runs["last"], runs["first"] = [], []
        for _ in range(PRESSES):  # alternate so each press really moves (0 <-> the last step)
            runs["last"].append(await timed("greater_than_sign"))
            runs["first"].append(await timed("less_than_sign"))
        runs["jump"] = [await timed(_jump(app, rng.randrange(1, n + 1))) for _ in range(PRESSES)]
    return {
        "steps": n, "nodes": len(app.cursor.timeline.store.current) - 1, "import_seconds": round(start - started, 2),
        "first_paint_seconds": round(first_paint, 2), "steps_at_first_paint": steps_at_first_paint,
        "load_seconds": round(loaded, 2),
        **{f"{name}_ms": {**_summary([w for w, _, _ in runs[name]]),
                          "to_first_repaint": _summary([f for _, f, _ in runs[name]]),
                          "to_last_repaint": _summary([last for _, _, last in runs[name]])} for name in runs},
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def _summary(samples: list[float]) -> dict:
    return {"mean": round(statistics.fmean(samples), 1), "max": round(max(samples), 1)}


async def _press_ms(pilot, key: str) -> float:
    """From the press to the screen settled, a background scan's answer included."""
    start = time.perf_counter()
    await pilot.press(key)
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    return round((time.perf_counter() - start) * 1e3, 1)


async def _measure_opened(part: str) -> dict:
    """The tour, or a stored run: first paint, then (a store) c / C / l, then q."""
    from ..model.debugging.breakpoints import parse_conditions
    from ..tui.app import WorkbenchApp
    from ..tui.widgets.step_list import StepList

    started = time.perf_counter()
    if part == "tour":
        from ..model.scenarios.bundled import tour_files
        from ..model.scenarios.scenario import load_scenario

        chapters = [load_scenario(path) for path in tour_files()]
    else:
        from ..model.timeline.stored import open_store

        chapters = [open_store(part)]
    start = time.perf_counter()
    app = WorkbenchApp(chapters, background=True)
    out: dict = {"load_files_seconds": round(start - started, 2)}
    frames: list[float] = []
    display = app._display  # each frame Textual writes to the (headless) terminal

    def timed_display(screen, renderable) -> None:
        display(screen, renderable)
        if renderable is not None and not frames:
            frames.append(time.perf_counter())

    app._display = timed_display
    async with app.run_test(size=SIZE) as pilot:
        while app.query_one(StepList).option_count < 2:
            await pilot.pause(0.005)
        await pilot.pause()
        out["first_paint_seconds"] = round(time.perf_counter() - start, 2)
        out["first_frame_seconds"] = round(frames[0] - start, 2)  # the chapter's text, its cache on its way
        if part != "tour":
            cursor = app.cursor
            components = cursor.state.components
            out["steps"] = cursor.available
            counter = f"{components[0]}_available<0"  # never: the whole run read for nothing
            for name, text in (("counter_never", counter), ("event", "event=split"),
                               ("record_never", "req=no-such-request")):
                cursor.breakpoints = parse_conditions([text], components)
                cursor.go(0)
                out[f"c_{name}_ms"] = await _press_ms(pilot, "c")
                out[f"c_{name}_step"] = cursor.step
                cursor.go(cursor.available)
                out[f"C_{name}_ms"] = await _press_ms(pilot, "C")
                out[f"C_{name}_step"] = cursor.step
            cursor.breakpoints = parse_conditions([counter, "event=split"], components)
            out["l_two_breakpoints_ms"] = await _press_ms(pilot, "l")
            await pilot.press("escape")
            await pilot.pause()
            out["l_again_ms"] = await _press_ms(pilot, "l")
            await pilot.press("escape")
            await pilot.pause()
        quit_start = time.perf_counter()
        await pilot.press("q")
    out["q_ms"] = round((time.perf_counter() - quit_start) * 1e3, 1)
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


if __name__ == "__main__":
    if len(sys.argv) == 1:
        print(json.dumps(tui_report(), indent=2))
    elif sys.argv[1] in PARTS:
        print(json.dumps(asyncio.run(_measure(sys.argv[1]))))
    else:
        print(json.dumps(asyncio.run(_measure_opened(sys.argv[1]))))
