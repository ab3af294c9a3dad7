"""Hostile and malformed input, one row per case: what the user typed, the exit code,
the one line it must say, and that every file around it is left as it was (bytes,
inode, link target) while the process stays small. A new case is one row in ``CASES``.

Each row runs ``urc`` as a user would, in a fresh interpreter inside a sandbox folder
holding the files below; the child's peak memory is read from ``wait4`` (and capped by
``RLIMIT_AS`` so that a regression fails the row instead of the machine)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import resource
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from urc_util import main_without_torch

ROOT = Path(__file__).resolve().parents[2]
SMALL_MB = 200  # bad input never costs more than this (a clean start is ~20 MB)
HEADER = 'schema = 1\n[scenario]\nname = "t"\n[config]\ncomponents = ["full"]\nkv_size = 64\n'
JSONL_HEADER = json.dumps({"schema": 1, "scenario": {"name": "t"}, "config": {"components": ["full"], "kv_size": 64}})


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    code: int
    says: str  # a regular expression the one stderr line (or, for exit 0, stdout) must match
    stdin: bytes | str = b""  # bytes to pipe in, or a path to read standard input from


CASES = [
    # inputs: only regular files, never read past the limit
    Case("dev-zero-link", ("run", "zero.toml"), 2, r"zero\.toml: is a character device, not a scenario file"),
    Case("fifo", ("run", "fifo.toml"), 2, r"fifo\.toml: is a named pipe \(FIFO\)"),
    Case("directory", ("run", "folder.toml"), 2, r"folder\.toml: is a directory"),
    Case("socket", ("run", "socket.toml"), 2, r"socket\.toml: is a socket, not a scenario file"),
    Case("follow-fifo", ("tui", "--follow", "fifo.jsonl"), 2, r"is a named pipe \(FIFO\), not a trace"),
    Case("follow-missing-dir", ("tui", "--follow", "missing/x.jsonl"), 2, r"directory missing does not exist"),
    Case("empty-stdin", ("run", "-"), 2, r"<stdin>: nothing came on standard input"),
    Case("dev-null-stdin", ("run", "-"), 2, r"<stdin>: nothing came on standard input", stdin="/dev/null"),
    Case("dev-zero-stdin", ("run", "-"), 2, r"<stdin>: is a character device, not a scenario", stdin="/dev/zero"),
    Case("duplicate-json-key", ("run", "dup.jsonl"), 2, r"dup\.jsonl:2: key 'op' is given twice"),
    # outputs: never through a link, never into a pipe or device, never over an input
    Case("record-to-device", ("run", "--record", "/dev/null", "--force", "smoke.toml"), 2,
         r"--record /dev/null: is a character device; urc writes only regular files \(even with --force\)"),
    Case("svg-to-fifo", ("svg", "smoke.toml", "-o", "out.svg", "--force"), 2, r"-o out\.svg: is a named pipe"),
    Case("record-to-dangling-link", ("run", "--record", "dangling.jsonl", "smoke.toml"), 2,
         r"is a symbolic link \(dangling\); urc never writes through a link"),
    Case("svg-to-dev-stdout", ("svg", "smoke.toml", "-o", "/dev/stdout"), 2,
         r"-o /dev/stdout: is a symbolic link; urc never writes through a link \(- writes to standard output\)"),
    Case("record-through-link", ("run", "--record", "link.jsonl", "--force", "smoke.toml"), 2,
         r"link\.jsonl: is a symbolic link;"),
    Case("record-over-hard-linked-input", ("run", "--record", "hard.jsonl", "--force", "base.jsonl"), 2,
         r"that is an input file of this command; refusing to overwrite it \(even with --force\)"),
    Case("write-trace-over-trace", ("bench", "--trace", "base.jsonl", "--write-trace", "base.jsonl", "--force"), 2,
         r"--write-trace base\.jsonl: that is an input file"),
    Case("write-trace-over-linked-trace", ("bench", "--trace", "link.jsonl", "--write-trace", "base.jsonl", "--force"),
         2, r"--write-trace base\.jsonl: that is an input file"),
    Case("fuzz-output-twice", ("fuzz", "-o", "out.toml", "--trace", "./out.toml"), 2,
         r"--trace \./out\.toml: the same file as -o"),
    Case("fuzz-output-exists", ("fuzz", "-o", "smoke.toml"), 2, r"-o smoke\.toml: file exists \(use --force"),
    Case("keys-without-a-trace", ("bench", "--keys", "list"), 2, r"--keys applies to --trace and --against"),
    Case("ops-without-fuzz", ("bench", "--ops", "500"), 2, r"--ops applies to --fuzz and --fuzz-jobs"),
    Case("ops-zero", ("bench", "--fuzz-jobs", "--ops", "0"), 2, r"--ops must be a positive int"),
    Case("write-trace-with-trace", ("bench", "--trace", "base.jsonl", "--write-trace", "new.jsonl"), 2,
         r"--write-trace writes the seeded workload .*leave out --trace"),
    Case("repeat-with-trace", ("bench", "--trace", "base.jsonl", "--repeat", "0.3"), 2,
         r"--repeat shapes the seeded workload .*leave out --trace"),
    # options and config values, checked before anything runs
    Case("negative-time-budget", ("fuzz", "--time-budget", "-1"), 2, r"--time-budget must be a positive number"),
    Case("nan-shrink-budget", ("fuzz", "--shrink-budget", "nan"), 2, r"--shrink-budget must be a positive number"),
    Case("fuzz-pool-too-small", ("fuzz", "--kv-size", "1"), 2, r"--kv-size 1 cannot admit the fuzzer's prompts"),
    Case("fuzz-swa-pool-too-small", ("fuzz", "--config", "full,swa", "--swa-kv-size", "8"), 2,
         r"--swa-kv-size 8 cannot admit"),
    Case("window-larger-than-pool", ("run", "window.toml"), 2,
         r"window\.toml:4: config cannot be built: sliding_window 1000 is larger than the SWA pool"),
    Case("keymap-collision", ("tui", "--keymap", "collide.toml", "smoke.toml"), 2,
         r"'p' would be bound to both step\.next and step\.previous"),
    Case("keymap-unknown-key", ("tui", "--keymap", "f99.toml", "smoke.toml"), 2, r"unknown key name 'F99'"),
    # messages: one line, long values elided, every field named
    Case("newline-in-file-name", ("run", "new\nline.toml"), 2, r"new\\nline\.toml:1: malformed TOML"),
    Case("huge-token", ("run", "huge.toml"), 2, r"\(got 9{40}… \(400 chars\)\) \(field 'key'\)$"),
    Case("negative-evict", ("run", "evict.toml"), 2, r"evict\.toml:9: must be a non-negative int \(field 'full'\)"),
    Case("newline-in-option", ("show", "--step", "1\n2", "smoke.toml"), 2, r"invalid int value: '1\\n2'"),
    # numbers past Python's 4,300 digits, nesting past its stack, sizes past what fits
    Case("digits-trace", ("run", "digits.jsonl"), 2, r"digits\.jsonl:2: a number has more than 4,300 digits$"),
    Case("digits-scenario", ("run", "digits.toml"), 2, r"digits\.toml:9: a number has more than 4,300 digits$"),
    Case("digits-config", ("run", "digits_config.toml"), 2, r"digits_config\.toml:6: a number has more than 4,300"),
    Case("digits-option", ("fuzz", "--option", "sliding_window=" + "9" * 5000), 2,
         r"--option sliding_window: a number has more than 4,300 digits$"),
    Case("digits-keymap", ("tui", "--keymap", "digits_keys.toml", "smoke.toml"), 2,
         r"digits_keys\.toml:1: a number has more than 4,300 digits$"),
    Case("deep-option", ("fuzz", "--option", "is_eagle=" + "[" * 5000), 2,
         r"--option is_eagle: a value is nested too deeply$"),
    Case("deep-detections", ("fuzz", "--faults", "new", "-o", "deep", "--force"), 2,
         r"-o deep: no readable detections\.json to add to \(maximum recursion depth"),
    Case("deep-scenario", ("run", "deep.toml"), 2, r"deep\.toml: a value is nested too deeply$"),
    Case("deep-trace", ("run", "deep.jsonl"), 2, r"deep\.jsonl:2: a value is nested too deeply$"),
    Case("dotted-key", ("run", "dotted.toml"), 2, r"dotted\.toml:7: a dotted key has more than 32 parts$"),
    Case("dotted-keymap", ("tui", "--keymap", "dotted_keys.toml", "smoke.toml"), 2,
         r"dotted_keys\.toml:1: a dotted key has more than 32 parts$"),
    Case("node-past-sqlite", ("why", "smoke.urcdb", "--node", str(2**70)), 2,
         r"smoke\.urcdb: --node must be a node id between 0 and 2\*\*63-1 \(got 1180591620717411303424\)$"),
    Case("node-negative", ("why", "smoke.toml", "--node", "-1"), 2, r"--node must be a node id between 0 and 2\*\*63-1"),
    Case("seeds-past-plan", ("fuzz", "--steps", "1", "--seeds", str(10**30), "--time-budget", "1"), 2,
         r"--seeds must be at most 1,000,000 \(got 1000000000000000000000000000000\)$"),
    Case("seed-negative", ("fuzz", "--seed", "-1"), 2, r"--seed must be between 0 and 9,223,372,036,854,775,807"),
    Case("steps-past-plan", ("fuzz", "--config", "full", "--steps", str(10**20)), 2,
         r"the run would plan 50000000000000000 episodes \(1 config x 1 seed x 50000000000000000 each\)"),
    Case("pool-past-memory", ("run", "pool.toml"), 2,
         r"pool\.toml:4: config cannot be built: kv_size 1073741824 is larger than this workbench supports "
         r"\(4,194,304: its pools are allocated whole\)$"),
    Case("mamba-pool-past-memory", ("run", "mamba_pool.toml"), 2, r"mamba_size 1048576 is larger than this workbench "
         r"supports \(262,144"),
    Case("host-pool-past-memory", ("run", "host_pool.toml"), 2,
         r"hicache host_kv_size 16777216 is larger than this workbench supports \(12,582,912"),
    Case("tree-past-pool", ("bench", "--tree-sizes", "1000,300000"), 2, r"--tree-sizes must be at most 260,112: "),
    # valid after all: runs
    Case("until-host-field", ("run", "--until", "full_host_evictable>0", "hicache.toml"), 0,
         r"stopped at step 1 \(insert, line \d+\): full_host_evictable>0"),
]


def make_sandbox(folder: Path) -> None:
    (folder / "smoke.toml").write_text((ROOT / "scenarios" / "smoke.toml").read_text())
    (folder / "hicache.toml").write_text((ROOT / "scenarios" / "tour_hicache.toml").read_text())
    (folder / "base.jsonl").write_text(JSONL_HEADER + '\n{"op": "insert", "key": [1, 2]}\n')
    os.link(folder / "base.jsonl", folder / "hard.jsonl")
    os.symlink("base.jsonl", folder / "link.jsonl")
    os.symlink("nowhere.jsonl", folder / "dangling.jsonl")
    os.symlink("/dev/zero", folder / "zero.toml")
    for fifo in ("fifo.toml", "fifo.jsonl", "out.svg"):
        os.mkfifo(folder / fifo)
    (folder / "folder.toml").mkdir()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(folder / "socket.toml"))  # the file stays after the socket object goes
    listener.close()
    (folder / "dup.jsonl").write_text(JSONL_HEADER + '\n{"op": "insert", "key": [1], "op": "match"}\n')
    (folder / "window.toml").write_text(HEADER.replace('["full"]', '["full", "swa"]')
                                        + "sliding_window = 1000\nswa_kv_size = 2\n")
    (folder / "collide.toml").write_text('"step.next" = "p"\n')
    (folder / "f99.toml").write_text('"step.next" = "ctrl+alt+shift+F99"\n')
    (folder / "new\nline.toml").write_text("not toml")
    (folder / "huge.toml").write_text(HEADER + '[[step]]\nop = "insert"\nkey = [1, ' + "9" * 400 + "]\n")
    (folder / "evict.toml").write_text(HEADER + '[[step]]\nop = "evict"\nfull = -3\n')
    nines = "9" * 5000  # past sys.get_int_max_str_digits()
    (folder / "digits.jsonl").write_text(JSONL_HEADER + '\n{"op": "insert", "key": [' + nines + "]}\n")
    (folder / "digits.toml").write_text(HEADER + '[[step]]\nop = "insert"\nkey = [1, ' + nines + "]\n")
    (folder / "digits_config.toml").write_text(HEADER.replace("kv_size = 64", "kv_size = " + nines))
    (folder / "digits_keys.toml").write_text('"step.next" = ' + nines + "\n")
    (folder / "deep").mkdir()
    (folder / "deep" / "detections.json").write_text("[" * 100_000 + "]" * 100_000)
    (folder / "deep.toml").write_text(HEADER + '[[step]]\nop = "insert"\nkey = ' + "[" * 100_000 + "]" * 100_000 + "\n")
    (folder / "deep.jsonl").write_text(JSONL_HEADER + '\n{"op": "insert", "key": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    (folder / "dotted.toml").write_text(HEADER + "x" + ".a" * 20_000 + " = 1\n")  # took tomllib to 1.5 GB
    (folder / "dotted_keys.toml").write_text("step" + ".a" * 20_000 + ' = "j"\n')
    (folder / "pool.toml").write_text(HEADER.replace("kv_size = 64", f"kv_size = {2**30}"))  # was OOM-killed at 24 GB
    (folder / "mamba_pool.toml").write_text(HEADER.replace('["full"]', '["full", "mamba"]')
                                            + f"mamba_size = {2**20}\n")
    (folder / "host_pool.toml").write_text(HEADER + f"hicache = {{ host_kv_size = {2**24} }}\n")
    from workbench.model.timeline.store_run import run_to_store

    run_to_store(str(folder / "smoke.toml"), str(folder / "smoke.urcdb")).close()


def files(folder: Path) -> dict[str, tuple]:
    """Every entry as it is: inode, type, and the bytes of a file or a link's target."""
    seen = {}
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        st = os.lstat(entry.path)
        if entry.is_symlink():
            what = os.readlink(entry.path)
        elif entry.is_file(follow_symlinks=False):
            what = hashlib.sha256(Path(entry.path).read_bytes()).hexdigest()
        else:
            what = None
        seen[entry.name] = (st.st_ino, st.st_mode, what)
    return seen


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("hostile")
    make_sandbox(folder)
    return folder


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))  # a runaway read fails here, not the machine


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_and_changes_no_file(case, sandbox):
    before = files(sandbox)
    source = open(case.stdin, "rb") if isinstance(case.stdin, str) else subprocess.PIPE
    child = subprocess.Popen([sys.executable, "-m", "workbench", *case.argv], cwd=sandbox, stdin=source,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_cap_memory,
                             env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"})
    if source is not subprocess.PIPE:
        source.close()
    try:  # a hang (a FIFO read) fails, never blocks CI
        out, err = child.communicate(None if source is not subprocess.PIPE else case.stdin, timeout=120)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        pytest.fail(f"{case.id}: still running after 120 s")
    assert child.returncode == case.code, err.decode()
    text = (err if case.code else out).decode()
    if case.code:
        assert "Traceback" not in text and len(text.strip().splitlines()) == 1, text
    assert re.search(case.says, text, re.MULTILINE), text
    assert files(sandbox) == before


PEAK_PROBE = ("import atexit, os, runpy, sys\n"
              "def peak():\n"
              "    with open('/proc/self/status') as status, open(os.environ['PEAK_FILE'], 'w') as out:\n"
              "        out.write(next(line for line in status if line.startswith('VmHWM')))\n"
              "atexit.register(peak)\n"
              "sys.argv = ['urc', *sys.argv[1:]]\n"
              "runpy.run_module('workbench', run_name='__main__')\n")


def test_peak_memory_of_a_bad_input_stays_small(sandbox, tmp_path):
    """The /dev/zero link used to take urc to 23 GB: now a bad input costs what a start
    does. The child reads its own high-water mark (a forked child's rusage would count
    the parent's pages)."""
    for argv in (("run", "zero.toml"), ("run", "fifo.toml"), ("fuzz", "--kv-size", "1"), ("run", "dotted.toml"),
                 ("fuzz", "--seeds", str(10**30))):
        peak_file = tmp_path / "peak"
        proc = subprocess.run([sys.executable, "-c", PEAK_PROBE, *argv], cwd=sandbox, capture_output=True,
                              preexec_fn=_cap_memory, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(ROOT), "PEAK_FILE": str(peak_file)})
        assert proc.returncode == 2, (argv, proc.stderr)
        kilobytes = int(peak_file.read_text().split()[1])
        assert kilobytes < SMALL_MB * 1024, (argv, kilobytes)


def test_fuzz_checks_its_options_and_lists_faults_before_importing_torch():
    codes, torch_loaded, err = main_without_torch(["fuzz", "--list-faults"], ["fuzz", "--kv-size", "1"],
                                                  ["fuzz", "--time-budget", "-1"])
    assert (codes, torch_loaded) == ([0, 2, 2], False), err


def test_an_output_that_fails_half_way_leaves_the_old_file_and_no_debris(tmp_path):
    """Replacing with --force goes through a temporary file: an error half-way drops it
    (the old file keeps its bytes and inode); a recording keeps its finished lines."""
    from workbench.model.scenarios.outputs import open_output

    target = tmp_path / "out.svg"
    target.write_text("GOOD")
    inode = target.stat().st_ino
    with pytest.raises(RuntimeError):
        with open_output(str(target), force=True) as stream:
            stream.write("PART")
            raise RuntimeError("the renderer failed")
    assert target.read_text() == "GOOD" and target.stat().st_ino == inode
    assert [p.name for p in tmp_path.iterdir()] == ["out.svg"]
    recording = tmp_path / "rec.jsonl"
    recording.write_text("old\n")
    with pytest.raises(KeyboardInterrupt):
        with open_output(str(recording), force=True, live=True) as stream:
            stream.write("step 1\n")
            raise KeyboardInterrupt
    assert recording.read_text() == "step 1\n" and sorted(p.name for p in tmp_path.iterdir()) == ["out.svg",
                                                                                                 "rec.jsonl"]
    with open_output(str(target), force=True) as stream:
        stream.write("NEW")
    assert target.read_text() == "NEW" and oct(target.stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
