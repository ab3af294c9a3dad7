"""The timeline store (``urc run TRACE --store RUN.urcdb``): a run streamed to SQLite
reads back exactly as the in-memory timeline of the same run, step for step; a
crash or a bad line keeps what finished; the CLI and the TUI open it."""

from __future__ import annotations

import json
import sqlite3
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workbench.model.debugging.breakpoints import parse_conditions
from workbench.model.timeline.search import search
from workbench.model.debugging.why import node_steps
from workbench.model.scenarios.scenario import ScenarioError
from workbench.model.scenarios.workload import write_trace
from workbench.model.timeline import stored
from workbench.model.debugging.cursor import TimelineCursor
from workbench.model.timeline.runner import run_scenario
from workbench.model.timeline.series import RunSeries
from workbench.model.timeline.store_file import CACHED_ROWS
from workbench.model.timeline.store_run import run_to_store
from workbench.model.timeline.stored import StoreError, open_store

ROOT = Path(__file__).resolve().parents[2]
URC = [sys.executable, "-m", "workbench"]


def trace(tmp_path: Path, requests: int, components=("full",), name="t.jsonl") -> Path:
    path = tmp_path / name
    with open(path, "w") as stream:
        write_trace(stream, requests, seed=3, components=components)
    return path


@pytest.fixture
def small_batches(monkeypatch):
    """Batches and keyframes far smaller than the defaults, so a short run crosses
    many flushes and rebuilds from many keyframes."""
    monkeypatch.setattr(stored, "BATCH_STEPS", 7)
    monkeypatch.setattr(stored, "KEYFRAME_MAX_STEPS", 11)


def assert_same_timeline(disk, memory) -> None:
    assert len(disk) == len(memory)
    for i in range(len(memory) + 1):
        a, b = disk.state_after(i), memory.state_after(i)
        assert a.records == b.records, f"state after step {i}"
        assert a.globals == b.globals, f"totals after step {i}"
    for mine, theirs in zip(disk.records, memory.records):
        assert (mine.step, mine.result, mine.error, mine.events, mine.violations, mine.failures, mine.full_check) == (
            theirs.step, theirs.result, theirs.error, theirs.events, theirs.violations, theirs.failures,
            theirs.full_check)
    assert disk.passed == memory.passed
    assert [r.index for r in disk.failing()] == [r.index for r in memory.failing()]


@pytest.mark.parametrize("components", [("full",), ("full", "swa", "mamba")])
def test_a_stored_run_reads_back_as_the_same_run_in_memory(tmp_path, small_batches, components):
    path = trace(tmp_path, 60, components)
    written = run_to_store(str(path), str(tmp_path / "run.urcdb"))
    memory = run_scenario(path)
    assert_same_timeline(written, memory)  # while writing: batches pending and on disk
    written.close()
    reopened = open_store(str(tmp_path / "run.urcdb"))
    assert reopened.complete and not reopened.scenario.notices
    assert_same_timeline(reopened, memory)
    for i in (0, 1, len(memory) // 2, len(memory)):  # jumps far apart, then neighbours both ways
        assert reopened.diff(i, min(i + 1, len(memory))) == memory.diff(i, min(i + 1, len(memory)))
        assert reopened.diff(i, max(i - 1, 0)) == memory.diff(i, max(i - 1, 0))
    nodes = {n for r in memory.records for e in r.events if (n := e.node) is not None}
    assert all(node_steps(reopened)(n) == node_steps(memory)(n) for n in nodes)
    assert list(reopened.scenario.steps) == list(memory.scenario.steps)


@pytest.mark.parametrize("name", ["tour.toml", "tour_sessions.toml", "tour_hicache_hybrid.toml", "tour_storage.toml"])
def test_toml_scenarios_store_every_kind_of_step(tmp_path, small_batches, name):
    """The tours run requests, sessions, a host tier and storage: their states too."""
    timeline = run_to_store(str(ROOT / "scenarios" / name), str(tmp_path / "run.urcdb"))
    timeline.close()
    assert_same_timeline(open_store(str(tmp_path / "run.urcdb")), run_scenario(ROOT / "scenarios" / name))


def failing_trace(tmp_path: Path) -> Path:
    header = {"schema": 1, "scenario": {"name": "fails"}, "config": {"components": ["full"], "kv_size": 64}}
    steps = [{"op": "insert", "key": [i, i + 1, i + 2]} for i in range(0, 30, 3)]
    steps[4]["expect"] = {"nodes": 99}
    steps[8]["expect"] = {"nodes": 98}
    path = tmp_path / "fails.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in [header, *steps]) + "\n")
    return path


def test_failures_and_breakpoints_come_from_the_stores_index(tmp_path, small_batches):
    path = failing_trace(tmp_path)
    run_to_store(str(path), str(tmp_path / "run.urcdb")).close()
    disk, memory = open_store(str(tmp_path / "run.urcdb")), run_scenario(path)
    assert [r.index for r in disk.failing()] == [5, 9] and not disk.passed
    assert disk.first_failure.index == 5
    defaults = parse_conditions(["violation", "failed"])
    for start in (0, 5, 9):
        assert search(disk, defaults, start) == search(memory, defaults, start)
        assert search(disk, defaults, start, forward=False) == search(memory, defaults, start, forward=False)
    ops = parse_conditions(["op=insert"])
    assert search(disk, ops, 3) == search(memory, ops, 3) == (4, ops[0])


def test_the_charts_read_the_rows_a_stored_run_kept(tmp_path, small_batches):
    """The series (``urc plot``, the charts screen) come from the rows the run wrote,
    equal to those a pass over the in-memory timeline counts, markers included."""
    for path in (failing_trace(tmp_path), trace(tmp_path, 40, ("full", "swa", "mamba"), "hybrid.jsonl")):
        target = tmp_path / f"{path.stem}.urcdb"
        run_to_store(str(path), str(target)).close()
        defaults = parse_conditions(["violation", "failed"])
        disk, memory = RunSeries(open_store(str(target)), defaults), RunSeries(run_scenario(path), defaults)
        assert disk.steps == memory.steps and list(disk.info) == list(memory.info)
        for name in memory.info:
            assert disk.values(name).tobytes() == memory.values(name).tobytes(), name
        assert list(disk.failing_steps) == list(memory.failing_steps)
        assert list(disk.breakpoint_steps) == list(memory.breakpoint_steps)


def test_a_bad_line_stops_the_run_and_the_store_keeps_the_steps_before_it(tmp_path):
    path = trace(tmp_path, 10)
    lines = path.read_text().splitlines()
    lines[20] = '{"op": "match", "key": [1, 2'
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ScenarioError, match=r"t\.jsonl:21: malformed JSON"):
        run_to_store(str(path), str(tmp_path / "run.urcdb"))
    kept = open_store(str(tmp_path / "run.urcdb"))
    assert len(kept) == 19 and not kept.complete
    assert "stopped early" in kept.scenario.notices[-1]
    prefix = tmp_path / "prefix.jsonl"
    prefix.write_text("\n".join(lines[:20]) + "\n")
    assert kept.final.records == run_scenario(prefix).final.records


def test_a_run_killed_mid_write_leaves_a_store_that_opens(tmp_path):
    path = trace(tmp_path, 3000)
    target = tmp_path / "run.urcdb"
    child = subprocess.Popen([*URC, "run", str(path), "--store", str(target)], cwd=tmp_path,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and child.poll() is None:  # until a few batches are committed
            if target.exists():
                try:
                    if open_store(str(target)).store.file.steps() >= 3 * stored.BATCH_STEPS:
                        break
                except StoreError:
                    pass
            time.sleep(0.05)
        assert child.poll() is None, "the run finished before it could be killed: make the trace longer"
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait()
    crashed = open_store(str(target))
    assert not crashed.complete and len(crashed) >= 3 * stored.BATCH_STEPS
    memory = run_scenario(path)
    for i in (0, len(crashed) // 2, len(crashed)):
        assert crashed.state_after(i).records == memory.state_after(i).records


def test_memory_holds_one_batch_and_the_live_tree(tmp_path):
    path = trace(tmp_path, 400)
    timeline = run_to_store(str(path), str(tmp_path / "run.urcdb"))
    store = timeline.store
    assert not store.pending and not store.pending_keyframes  # all of it is in the file
    for _ in timeline.records:  # a full read keeps only a window decoded
        pass
    assert len(store.records._cache) <= CACHED_ROWS
    assert len(store.current) == len(run_scenario(path).final.records)


def cli(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([*URC, *args], cwd=cwd, capture_output=True, text=True)


def test_cli_writes_a_store_and_never_overwrites_one_without_force(tmp_path):
    path = failing_trace(tmp_path)
    done = cli("run", str(path), "--store", "run.urcdb", cwd=tmp_path)
    assert done.returncode == 1 and "FAIL" in done.stdout and "stored 10 steps in run.urcdb" in done.stdout
    before = (tmp_path / "run.urcdb").stat().st_mtime_ns
    again = cli("run", str(path), "--store", "run.urcdb", cwd=tmp_path)
    assert again.returncode == 2 and "file exists" in again.stderr and "Traceback" not in again.stderr
    assert (tmp_path / "run.urcdb").stat().st_mtime_ns == before
    assert cli("run", str(path), "--store", "run.urcdb", "--force", cwd=tmp_path).returncode == 1
    for bad, said in ((["--json"], "leave out --json"), (["--until", "failed"], "leave out --until")):
        refused = cli("run", str(path), "--store", "other.urcdb", *bad, cwd=tmp_path)
        assert refused.returncode == 2 and said in refused.stderr
    wrong = cli("run", str(path), "--store", "run.db", cwd=tmp_path)
    assert wrong.returncode == 2 and "writes a .urcdb file" in wrong.stderr
    shown = cli("tui", "run.urcdb", cwd=tmp_path)  # not a terminal: the run's report
    assert shown.returncode == 1 and "FAIL" in shown.stdout and "step 5" in shown.stdout
    plotted = cli("plot", "run.urcdb", "-o", "run.svg", cwd=tmp_path)
    assert plotted.returncode == 0, plotted.stderr
    assert "wrote run.svg (10 steps; 2 failing, the first at step 5)" in plotted.stderr + plotted.stdout
    assert (tmp_path / "run.svg").read_text().startswith("<?xml")


def test_opening_something_that_is_not_a_store_is_one_clear_line(tmp_path):
    from workbench.cli.common import STORE_SUFFIX

    assert STORE_SUFFIX == stored.SUFFIX
    (tmp_path / "junk.urcdb").write_text("not a database")
    for path in ("junk.urcdb", "missing.urcdb"):
        done = cli("tui", path, cwd=tmp_path)
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1


def test_the_cursor_reads_a_stored_run_and_refuses_live_ops(tmp_path):
    path = trace(tmp_path, 30)
    run_to_store(str(path), str(tmp_path / "run.urcdb")).close()
    cursor = TimelineCursor([open_store(str(tmp_path / "run.urcdb"))])
    assert cursor.chapter.loaded and cursor.chapter.read_only and cursor.total == 120
    cursor.go(77)
    memory = run_scenario(path)
    assert cursor.state.records == memory.state_after(77).records
    assert cursor.diff() == memory.diff(76, 77)
    assert cursor.names() == {}
    with pytest.raises(ScenarioError, match="read-only"):
        cursor.append({"op": "match", "key": [1, 2]})
    assert len(cursor.timeline) == 120


def test_the_workbench_steps_through_a_stored_run(tmp_path):
    import asyncio

    from workbench.tui.app import WorkbenchApp
    from workbench.tui.widgets.step_list import WINDOW, StepList

    path = trace(tmp_path, 300)
    run_to_store(str(path), str(tmp_path / "run.urcdb")).close()

    async def drive():
        app = WorkbenchApp([open_store(str(tmp_path / "run.urcdb"))])
        async with app.run_test(size=(160, 50)) as pilot:
            await pilot.pause()
            listed = app.query_one(StepList)
            assert listed.option_count <= WINDOW + 2  # a window, not 1,200 steps
            await pilot.press("n", "n")
            assert app.cursor.step == 2
            app.cursor.go(900)
            app.refresh_view()
            await pilot.pause()
            assert listed.get_option_at_index(listed.highlighted).id == "s900"
            await pilot.press("p")
            assert listed.get_option_at_index(listed.highlighted).id == "s899"
            await pilot.press(":", *"match key=[1,2]", "enter")
            await pilot.pause()
            assert app.cursor.step == 899 and len(app.cursor.timeline) == 1200

    asyncio.run(drive())


READ_WITHOUT_TORCH = r'''
import asyncio, sys, traceback

class Watch:  # notes who imports torch, and lets the import go on (a caught ImportError would hide it)
    seen = []
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "torch" and not self.seen:
            self.seen.append("\n".join(f"{f.filename}:{f.lineno}" for f in traceback.extract_stack()
                                        if "importlib" not in f.filename))
        return None

sys.meta_path.insert(0, Watch())
from workbench.cli import main
from workbench.model.debugging.breakpoints import parse_conditions
from workbench.model.timeline.search import search
from workbench.model.debugging.why import node_steps, why_node
from workbench.model.debugging.cursor import TimelineCursor
from workbench.model.timeline.series import RunSeries
from workbench.model.timeline.stored import open_store
from workbench.tui.app import WorkbenchApp

path = sys.argv[1]
timeline = open_store(path)
cursor = TimelineCursor([timeline])
for step in (len(timeline), 1, len(timeline) // 2):
    cursor.go(step)
    cursor.view().state.nodes, cursor.diff()
node = max(cursor.state.records)
why_node(timeline, len(timeline) // 2, node, node_steps(timeline))
search(timeline, parse_conditions(["full_available<100", "event=evict", "node=3"]), 0)
RunSeries(timeline).values("full_available")

async def drive():
    async with WorkbenchApp([open_store(path)]).run_test(size=(160, 50)) as pilot:
        for key in ("n", ">", "d", "escape", "y", "escape", "l", "escape", "c"):
            await pilot.press(key)
            await pilot.pause()

asyncio.run(drive())
for args in (["show", path], ["why", path, "--step", "5"], ["diff", path, "--from", "1", "--to", "4"]):
    assert main(args) == 0, args
print("torch imported by:\n" + Watch.seen[0] if Watch.seen else "no torch")
'''


def test_reading_a_stored_run_never_imports_torch(tmp_path):
    """Reopening is the store's read and the model's imports: torch alone takes ~2 s to
    import, so a stored run's readers (cursor, why, breakpoints, charts, the workbench
    and the CLI) must not import it. Run in a fresh interpreter, as a user opens one."""
    path = trace(tmp_path, 60, components=("full", "swa", "mamba"))
    run_to_store(str(path), str(tmp_path / "run.urcdb")).close()
    done = subprocess.run([sys.executable, "-c", READ_WITHOUT_TORCH, str(tmp_path / "run.urcdb")], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "no torch", done.stdout[-3000:]


def test_the_store_bench_runs_a_trace_and_reopens_it_twice():
    from workbench.bench.store import store_report

    said = []
    report = store_report(200, ("full",), emit=said.append)
    assert report["steps"] == 200 and report["jumps"] == 40 and report["peak_rss_mb"] > 0
    assert said[0].startswith("wrote 200 steps")
    for first, again in (("reopen_seconds", "reopen_again_seconds"),
                         ("reopen_process_seconds", "reopen_again_process_seconds")):
        assert report[first] > 0 and report[again] > 0
    # the whole process holds the in-process part: interpreter start, imports, opening
    assert report["reopen_process_seconds"] >= report["reopen_seconds"]
    assert report["jump_ms_median"] <= report["jump_ms_max"] and report["workbench_first_paint_seconds"] > 0


def test_a_batch_interrupted_mid_write_is_written_again_whole(tmp_path, monkeypatch, small_batches):
    """Ctrl-C or SIGTERM inside a batch's transaction rolls it back, keys included: the
    store the interrupted run keeps reads every step it says it holds."""
    from workbench.model.timeline.store_file import StoreFile

    path = trace(tmp_path, 20)
    real, said = StoreFile.put_meta, []

    def interrupted_once(self, name, value):
        if name == "summary" and not said:
            said.append(name)
            raise KeyboardInterrupt  # after the batch's steps and new keys, before COMMIT
        return real(self, name, value)

    monkeypatch.setattr(StoreFile, "put_meta", interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        run_to_store(str(path), str(tmp_path / "run.urcdb"))
    kept = open_store(str(tmp_path / "run.urcdb"))
    memory = run_scenario(path)
    assert said and 0 < len(kept) and not kept.complete
    for i in range(len(kept) + 1):
        assert kept.state_after(i).records == memory.state_after(i).records, i


def test_small_values_are_written_plain_and_large_ones_compressed():
    from workbench.model.timeline import store_codec

    small = {"nodes": (1, 2, 3)}
    large = {"nodes": tuple(range(store_codec.COMPRESS_FROM))}
    small_blob, large_blob = store_codec.encode(small), store_codec.encode(large)
    assert small_blob[:1] == b"m" and large_blob[:1] == b"z"
    assert len(large_blob) < len(store_codec.encode(large, compress=False))
    assert store_codec.decode(small_blob) == small and store_codec.decode(large_blob) == large


def namespaced_trace(tmp_path: Path) -> Path:
    """Keys under a salt and an extra key: their nodes' namespaces are records too."""
    header = {"schema": 1, "scenario": {"name": "namespaced"}, "config": {"components": ["full"], "kv_size": 64}}
    steps = [{"op": "insert", "key": [1, 2, 3, 4], "cache_salt": "s"}, {"op": "insert", "key": [1, 2, 5], "extra_key": "a"},
             {"op": "match", "key": [1, 2, 3], "cache_salt": "s"}, {"op": "insert", "key": [1, 2, 3, 9], "cache_salt": "s"}]
    path = tmp_path / "namespaced.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in [header, *steps]) + "\n")
    return path


@pytest.mark.parametrize("form", ["plain", "marked"])
def test_node_records_read_back_in_either_form(tmp_path, monkeypatch, form):
    """Node records are written in the codec's plain form (format 5); a store an
    earlier urc wrote with them marked (format 4) reads back the same."""
    from cache.basics.keys import Namespace

    monkeypatch.setattr(stored, "BATCH_STEPS", 2)
    if form == "marked":
        monkeypatch.setattr(stored, "encode_plain", stored.encode)
        monkeypatch.setattr(stored, "FORMAT", 4)
    path = namespaced_trace(tmp_path)
    run_to_store(str(path), str(tmp_path / "run.urcdb")).close()
    with sqlite3.connect(tmp_path / "run.urcdb") as db:
        heads = {bytes(row[0][:1]) for row in db.execute("SELECT delta FROM steps UNION SELECT records FROM keyframes")}
    db.close()
    assert heads <= ({b"p", b"q"} if form == "plain" else {b"m", b"z"})
    reopened, memory = open_store(str(tmp_path / "run.urcdb")), run_scenario(path)
    assert_same_timeline(reopened, memory)
    assert any(type(r.namespace) is Namespace for r in reopened.state_after(len(memory)).records.values())
