"""The command line is safe by default: it loses no file, shows no traceback, says
what went wrong in one line with the right exit code, and reads like a Unix tool
(``--version``, ``-`` for stdin, quiet on a closed pipe, plain lines when piped)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from urc_util import HEADER, JSONL_HEADER, jsonl, toml, urc
from workbench.cli import EXIT_CODES, build_parser

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "scenarios" / "smoke.toml"


def run_cli(*argv: str, input: bytes | None = None, cwd: str | None = None) -> subprocess.CompletedProcess:
    """``urc`` as a user runs it: a fresh interpreter, bytes in and out."""
    return subprocess.run([sys.executable, "-m", "workbench", *argv], input=input, capture_output=True,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)


def one_line_error(proc: subprocess.CompletedProcess, code: int, says: str) -> None:
    err = proc.stderr.decode()
    assert proc.returncode == code, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert says in err, err


# ---- files are never lost -----------------------------------------------------------------


def test_record_refuses_to_overwrite_its_own_input_even_with_force(tmp_path):
    scenario = tmp_path / "s.toml"
    scenario.write_text(SMOKE.read_text())
    before = scenario.read_text()
    for extra in ((), ("--force",)):
        proc = run_cli("run", "--record", str(scenario), *extra, str(scenario))
        one_line_error(proc, 2, "that is an input file")
        assert scenario.read_text() == before  # the hand-written TOML, comments and all


def test_record_refuses_an_existing_file_without_force(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("keep.jsonl").write_text("precious\n")
    rc, out, err = urc(capsys, "run", "--record", "keep.jsonl", str(SMOKE))
    assert rc == 2 and "file exists (use --force to overwrite it)" in err
    assert Path("keep.jsonl").read_text() == "precious\n"
    assert urc(capsys, "run", "--record", "keep.jsonl", "--force", str(SMOKE))[0] == 0
    assert Path("keep.jsonl").read_text().count("\n") == 6
    assert [p.name for p in tmp_path.iterdir()] == ["keep.jsonl"]  # no temporary file left behind


@pytest.mark.parametrize("target, says", [("missing/out.jsonl", "directory missing does not exist"),
                                          (".", "is a directory")])
def test_record_into_a_bad_path_is_one_line(tmp_path, target, says):
    one_line_error(run_cli("run", "--record", target, str(SMOKE), cwd=str(tmp_path)), 2, says)


def test_an_interrupted_recording_keeps_every_finished_step(capsys, tmp_path, monkeypatch):
    import workbench.model.timeline.runner as runner

    monkeypatch.chdir(tmp_path)
    real_step, calls = runner.Runner.step, []

    def step(self):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real_step(self)

    monkeypatch.setattr(runner.Runner, "step", step)
    rc, out, err = urc(capsys, "run", "--record", "rec.jsonl", str(SMOKE))
    assert rc == 130 and "interrupted" in err
    assert out.startswith("STOPPED") and "(interrupted: 3 steps of 5 checked, 0 failed)" in out
    lines = Path("rec.jsonl").read_text().splitlines()
    assert len(lines) == 1 + 3 and json.loads(lines[0])["schema"] == 1  # header + 3 finished steps
    monkeypatch.setattr(runner.Runner, "step", real_step)
    assert urc(capsys, "run", "rec.jsonl")[0] == 0  # and it replays



def test_a_new_recording_can_be_followed_while_it_is_written(capsys, tmp_path, monkeypatch):
    """``urc tui --follow`` reads a recording as it grows: each finished step is in the
    file (flushed) before the next one runs, and a follower sees it."""
    import workbench.model.timeline.runner as runner
    from workbench.model.timeline.follow import TraceFollower

    monkeypatch.chdir(tmp_path)
    real_step, seen = runner.Runner.step, []
    follower = TraceFollower("rec.jsonl")

    def step(self):
        if self._next == 2:  # two steps finished: the follower sees exactly them
            scenario = follower.start()
            seen.append([s.index for s in scenario.steps])
        if self._next == 4:
            seen.append([line for _, line in follower.poll()])
        return real_step(self)

    monkeypatch.setattr(runner.Runner, "step", step)
    rc, _, err = urc(capsys, "run", "--record", "rec.jsonl", str(SMOKE))
    assert rc == 0, err
    assert seen == [[1, 2], [4, 5]]  # steps 3 and 4 arrived on lines 4 and 5
    assert not list(tmp_path.glob(".*.part"))

# ---- one error path -------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["run", "--json", "--states"], ["run", "--json", "--full-states"], ["show", "--walk"]],
                         ids=["json", "json-full", "rich"])
def test_a_closed_pipe_exits_quietly(tmp_path, command):
    steps = [{"op": "insert", "key": [i, i + 1, i + 2]} for i in range(0, 600, 3)]
    trace = jsonl(str(tmp_path / "long.jsonl"), *steps, header={**JSONL_HEADER, "config": {
        "components": ["full"], "kv_size": 4096}})
    proc = subprocess.Popen([sys.executable, "-m", "workbench", *command, trace],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    proc.stdout.read(10)
    proc.stdout.close()  # like `| head -c 10`
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 0 and err == ""


def test_an_unexpected_error_is_one_line_that_points_at_debug(capsys, monkeypatch):
    import workbench.model.timeline.runner as runner

    def broken(self):
        raise RuntimeError("something nobody expected\nsecond line")

    monkeypatch.setattr(runner.Runner, "step", broken)
    rc, out, err = urc(capsys, "run", str(SMOKE))
    assert rc == 3
    assert err.strip() == ("urc run: internal error: RuntimeError: something nobody expected "
                           "(run again with --debug for the traceback)")
    with pytest.raises(RuntimeError):
        urc(capsys, "run", "--debug", str(SMOKE))


@pytest.mark.parametrize("argv, says", [
    (["bench", "--device", "tpu"], "invalid choice: 'tpu'"),
    (["bench", "--components", "swa"], "invalid choice: 'swa'"),
    (["bench", "--requests", "0"], "--requests must be a positive int"),
    (["bench", "--tree-sizes", "1,x"], "--tree-sizes must be comma-separated ints"),
    (["run", "--states", str(SMOKE)], "--states only applies with --json"),
    (["run", "--force", str(SMOKE)], "--force only applies with --record"),
    (["run", "-", "-"], "standard input (-) can be read only once"),
    (["show", "--step", "99", str(SMOKE)], "--step must be between 0 and 5"),
    (["show", str(SMOKE), str(SMOKE)], "several files only with --walk"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_usage_errors_are_one_line_with_exit_2(capsys, argv, says):
    rc, out, err = urc(capsys, *argv)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and says in err, err


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a GPU")
def test_bench_on_cuda_without_a_gpu_is_a_clear_error(capsys):
    rc, out, err = urc(capsys, "bench", "--device", "cuda", "--requests", "5")
    assert rc == 2 and "no CUDA device is available" in err


def test_deeply_nested_json_is_a_clear_error(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text(json.dumps(JSONL_HEADER) + "\n" + '{"op": "insert", "key": ' + "[" * 5000 + "]" * 5000 + "}\n")
    one_line_error(run_cli("run", str(path)), 2, "deep.jsonl:2: a value is nested too deeply")


def test_a_key_over_the_size_limit_is_a_clear_error(capsys, tmp_path, monkeypatch):
    import workbench.model.scenarios.step as scenario

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(scenario, "MAX_KEY_TOKENS", 100)
    f = toml("big.toml", f'[[step]]\nop = "insert"\nkey = {list(range(101))}\n')
    rc, out, err = urc(capsys, "run", f)
    assert rc == 2 and "big.toml:11: 101 tokens is more than the 100 a key may hold (field 'key')" in err


def test_a_bad_file_is_reported_before_torch_is_imported(tmp_path):
    bad = toml(str(tmp_path / "bad.toml"), '[[step]]\nop = "insrt"\n')
    badconfig = tmp_path / "cfg.toml"
    badconfig.write_text(HEADER.replace('["full"]', '["full", "swa"]') + '[[step]]\nop = "check"\n')
    code = ("import sys; from workbench.cli import main; "
            f"codes = [main(['run', {bad!r}]), main(['show', {str(badconfig)!r}])]; "
            "print(codes, 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.decode().split() == ["[2,", "2]", "False"], proc.stderr.decode()
    assert "sliding_window" in proc.stderr.decode()


# ---- conventions ----------------------------------------------------------------------------


def test_version_and_exit_codes_in_help(capsys):
    rc, out, err = urc(capsys, "--version")
    assert rc == 0 and out.startswith("urc ") and out.split()[1][0].isdigit()
    for argv in (["--help"], ["run", "--help"], ["show", "--help"], ["bench", "--help"]):
        rc, out, err = urc(capsys, *argv)
        assert rc == 0 and EXIT_CODES in out


def test_every_option_has_help_and_file_is_listed_once(capsys):
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.choices and isinstance(a.choices, dict)).choices
    for name, sub in subparsers.items():
        for action in sub._actions:
            if action.help != "==SUPPRESS==":
                assert action.help, f"urc {name} {action.option_strings or action.dest} has no help"
    rc, out, err = urc(capsys, "show", "--help")
    usage = out.split("\n\n")[0]
    assert usage.count("FILE") == 2 and "FILE [FILE ...]" in usage


def test_stdin_and_a_byte_order_mark(tmp_path):
    text = SMOKE.read_bytes()
    proc = run_cli("run", "-", input=text)
    assert proc.returncode == 0 and proc.stdout.decode().startswith("PASS <stdin> — smoke (5 steps)")
    recorded = tmp_path / "r.jsonl"
    assert run_cli("run", "--record", str(recorded), str(SMOKE)).returncode == 0
    assert run_cli("run", "-", input=recorded.read_bytes()).returncode == 0  # JSONL on stdin
    bom = tmp_path / "bom.toml"
    bom.write_bytes(b"\xef\xbb\xbf" + text)
    assert run_cli("run", str(bom)).returncode == 0


def test_piped_output_is_plain_and_unwrapped(tmp_path):
    long_dir = tmp_path / ("a-directory-name-long-enough-to-push-the-line-past-eighty-columns" * 2)
    long_dir.mkdir()
    scenario = long_dir / "s.toml"
    scenario.write_text(SMOKE.read_text())
    proc = run_cli("run", str(scenario))
    lines = proc.stdout.decode().splitlines()
    assert lines == [f"PASS {scenario} — smoke (5 steps)"] and "\x1b[" not in proc.stdout.decode()


def test_no_python_reprs_in_user_facing_text(capsys):
    scenarios = sorted(str(p) for p in (ROOT / "scenarios").rglob("*.toml") if p.parent.name != "fuzz")  # fuzz/: fail on purpose
    rc, out, err = urc(capsys, "show", "--walk", *scenarios)
    assert rc == 0
    generated = "\n".join(line for line in out.splitlines()  # descriptions may quote upstream's messages
                          if line.startswith(("-- step", "result:", "  [step", "error:", "✗")) or "#" in line)
    assert "-- step" in generated and "result: prefix_len=" in generated and "  [step " in generated
    for leak in ("=None", "=False", "=True", "Result(", "(1 steps)", "tensor("):
        assert leak not in generated, leak
    rc, out, err = urc(capsys, "demo")
    assert rc == 0 and "Result(" not in out and "=None" not in out


def test_long_keys_are_elided_with_their_length(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    key = list(range(1, 4097))
    f = jsonl("long.jsonl", {"op": "insert", "key": key, "expect": {"prefix_len": 5}},
              header={**JSONL_HEADER, "config": {"components": ["full"], "kv_size": 8192}})
    rc, out, err = urc(capsys, "run", f)
    assert rc == 1 and "insert(key=[1 2 3 … 4095 4096] (4,096 tokens))" in out and len(out) < 400
    rc, out, err = urc(capsys, "show", f)
    assert "[1 2 3 … 4095 4096] (4,096 tokens)" in out and "4000" not in out


# ---- names and empty scenarios ---------------------------------------------------------------

MATCH = '[[step]]\nop = "insert"\nkey = [1, 2]\n[[step]]\nop = "match"\nkey = [1, 2]\nas = "m"\n'
LOCK = '[[step]]\nop = "lock"\nmatch = "m"\nas = "l"\n'


@pytest.mark.parametrize("steps, where, says", [
    (MATCH + LOCK + LOCK, "bad.toml:23", "lock name 'l' is still held (locked at line 16)"),
    (MATCH + MATCH, "bad.toml:22", "match name 'm' is already taken (named at line 12)"),
    ('[[step]]\nop = "req_prefill"\nreq = "r"\ntokens = [1]\n' * 2, "bad.toml:15",
     "request 'r' is already running (started at line 9)"),
])
def test_reusing_a_live_name_names_both_lines(capsys, tmp_path, monkeypatch, steps, where, says):
    monkeypatch.chdir(tmp_path)
    rc, out, err = urc(capsys, "run", toml("bad.toml", steps))
    assert rc == 2 and where in err and says in err, err


def test_a_scenario_with_no_steps_warns(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = urc(capsys, "run", toml("empty.toml"))
    assert rc == 0 and err.strip() == "note: empty.toml: the scenario has no steps"
    assert out.strip() == "PASS empty.toml — t (0 steps)"


# ---- the benchmark's trace writer and timeline section -------------------------------------------


def test_write_trace_is_the_benchmark_workload_and_refuses_to_overwrite(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = urc(capsys, "bench", "--write-trace", "w.jsonl", "--requests", "7", "--components", "full,swa")
    assert rc == 0 and "wrote 28 steps (7 requests) to w.jsonl" in err
    lines = [json.loads(line) for line in Path("w.jsonl").read_text().splitlines()]
    assert lines[0]["config"]["components"] == ["full", "swa"] and len(lines) == 29
    assert [s["op"] for s in lines[1:5]] == ["match", "lock", "insert", "unlock"]
    assert urc(capsys, "run", "w.jsonl")[0] == 0
    rc, out, err = urc(capsys, "bench", "--write-trace", "w.jsonl", "--requests", "3")
    assert rc == 2 and "file exists" in err and len(Path("w.jsonl").read_text().splitlines()) == 29


def test_bench_runs_small(capsys):
    rc, out, err = urc(capsys, "bench", "--requests", "20", "--tree-sizes", "50", "--json")
    report = json.loads(out)
    assert rc == 0 and report["no_observer"]["invariants_ok"] and report["with_observer"]["invariants_ok"]
    assert report["no_observer"]["ops"]["match"]["n"] == 20 and set(report["tree_size"]) == {"50"}


def test_timeline_bench_parts_run_small():
    from workbench.bench.timeline import part_random, part_trace, part_tree

    assert part_trace(5, ("full",))["steps"] == 20
    assert part_random(200, ("full", "swa", "mamba"))["passed"]
    tree = part_tree(300, ("full",))
    assert tree["nodes"] >= 300 and tree["full_sweep_ms"] > 0 and tree["diff_adjacent_ms"] is not None


def test_a_trace_over_the_size_limit_is_refused_not_truncated(capsys, tmp_path, monkeypatch):
    import workbench.model.scenarios.scenario as scenario

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(scenario, "MAX_FILE_BYTES", 1000)
    f = jsonl("big.jsonl", *[{"op": "insert", "key": [i, i + 1]} for i in range(100)])
    rc, out, err = urc(capsys, "run", f)
    assert rc == 2 and "urc reads scenario files and traces up to" in err and "(split the trace)" in err


def test_progress_shows_only_on_a_terminal(capsys):
    import io

    from workbench.render.report import progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    piped, terminal = io.StringIO(), Terminal()
    for stream in (piped, terminal):
        with progress(300, "trace.jsonl", stream) as advance:
            for _ in range(300):
                advance()
    assert piped.getvalue() == "" and "300/300" in terminal.getvalue()
