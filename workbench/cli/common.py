"""What every ``urc`` subcommand shares: exit codes, the one-line usage error, stderr
notes and loading scenario files. Knows no subcommand, so any of them may import it
without an import cycle."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading

from ..model.scenarios.errors import elide, one_line
from ..model.scenarios.scenario import STDIN, ScenarioError
from ..model.ops.spec import sglang_component_sets
from ..model.timeline.step_hold import HOLD

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_TERMINATED = 143  # 128 + SIGTERM, as a shell reports a process the signal ended
EXIT_CODES = """\
exit codes:
  0    every check passed
  1    a check failed: an expectation, an invariant or a KV fingerprint (urc fuzz: it found a failure)
  2    bad input: an invalid scenario file, option or output path
  3    an internal error in urc (run again with --debug for the traceback)
  130  interrupted (Ctrl-C)
  143  terminated (SIGTERM)"""

FILE_HELP = "a .toml scenario or .jsonl trace; - reads one from standard input"
STORE_SUFFIX = ".urcdb"  # model.timeline.stored.SUFFIX, known here without importing the model
STORED_HELP = FILE_HELP + "; or a .urcdb store (urc run --store), read without running"
STORAGE_DIR_HELP = ("keep a file storage tier's pages in DIR: a new directory (its parent must exist), or one "
                    "an earlier run made (it holds urc's .urc-storage marker); default: a private temporary "
                    "directory, removed afterwards (a storage path in the scenario file is ignored; one FILE only)")


def version() -> str:
    """``urc --version``: this package's version and the SGLang version its cache follows."""
    from ..bridge.sglang_env import SGLANG_VERSION

    try:
        from importlib.metadata import version as dist_version

        installed = dist_version("unified-cache-workbench")
    except Exception:  # running from a source tree that was never installed
        installed = "unknown"
    return f"{installed} (follows SGLang {SGLANG_VERSION})"


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # usage errors: one line, exit 2, like invalid files
        print(one_line(f"{self.prog}: error: {elide(message, 300)} (see {self.prog} --help)"), file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is: a KeyboardInterrupt, so every cleanup Ctrl-C
    runs (a half-written store dropped, SQLite's side files and temporary directories
    removed) runs for it too, where the default action left them all behind."""


@contextlib.contextmanager
def interrupts_between_steps():
    """For the command's length, SIGTERM raises ``Terminated`` and Ctrl-C
    ``KeyboardInterrupt`` between steps: one arriving while a step runs waits for it
    to end (``step_hold``), a second one does not. The previous handlers are back
    afterwards; a Ctrl-C someone set to be ignored stays ignored. A forked worker that
    inherited the SIGTERM handler dies of the signal as before (its parent does the
    cleaning)."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    pid = os.getpid()

    def on_sigterm(signum, frame):
        if os.getpid() != pid:
            signal.signal(signal.SIGTERM, restore_term)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        HOLD.deliver(Terminated())

    def on_sigint(signum, frame):
        HOLD.deliver(KeyboardInterrupt())

    previous_term = signal.signal(signal.SIGTERM, on_sigterm)
    restore_term = previous_term if previous_term is not None else signal.SIG_DFL  # (None: set outside Python)
    previous_int = signal.getsignal(signal.SIGINT)
    if previous_int is signal.default_int_handler:
        signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, restore_term)
        if previous_int is signal.default_int_handler:
            signal.signal(signal.SIGINT, previous_int)


def say(line: str) -> None:
    """One line on stderr, whatever the line holds (control characters escaped)."""
    try:
        print(one_line(line), file=sys.stderr)
    except (BrokenPipeError, OSError):
        pass


def silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def load_all(files: list[str]):
    """Load and check every file (and its config) before running any: no torch yet."""
    from ..model.scenarios.scenario import cache_config, load_scenario

    if files.count(STDIN) > 1:
        raise ScenarioError("standard input (-) can be read only once")
    scenarios = [load_scenario(path) for path in files]
    for scenario in scenarios:
        cache_config(scenario)
        for notice in scenario.notices:
            say(f"note: {notice}")
    return scenarios


def load_chapters(files: list[str]):
    """``load_all``, but a ``.urcdb`` file is opened as a stored run (``urc run --store``):
    already checked, read from disk as it is viewed."""
    stored = {}
    if any(str(path).endswith(STORE_SUFFIX) for path in files):  # (else no torch yet: bad files are said first)
        from ..model.timeline.stored import open_store

        stored = {n: open_store(path) for n, path in enumerate(files) if str(path).endswith(STORE_SUFFIX)}
    for timeline in stored.values():
        for notice in timeline.scenario.notices:
            say(f"note: {notice}")
    loaded = iter(load_all([path for n, path in enumerate(files) if n not in stored]))
    return [stored[n] if n in stored else next(loaded) for n in range(len(files))]


def stores_named(args) -> list[str]:
    """The stored runs (``.urcdb``) a command was given."""
    named = getattr(args, "files", None) or [getattr(args, "file", None)]
    return [str(path) for path in named if str(path).endswith(STORE_SUFFIX)]


def is_stored_run(chapter) -> bool:
    """A chapter ``load_chapters`` opened from a store (``urc run --store``): already
    checked, read from its file; anything else is a scenario still to run."""
    from ..model.scenarios.scenario import Scenario

    return not isinstance(chapter, Scenario)


def scenario_of(chapter):
    """A chapter's scenario: a stored run's is in its file, a scenario is its own."""
    return chapter.scenario if is_stored_run(chapter) else chapter


def timeline_of(chapter):
    """A chapter's timeline: a stored run's is read from its file; a scenario is run
    (only then the cache, and torch, are imported)."""
    if is_stored_run(chapter):
        return chapter
    from ..model.timeline.runner import run_scenario

    return run_scenario(chapter)


def load_one(path: str):
    """One file as (scenario, timeline-maker): a store's timeline is read from it, a
    scenario's is run (only when asked for: a bad option is said first)."""
    opened = load_chapters([path])[0]
    return scenario_of(opened), lambda: timeline_of(opened)


def check_storage_dir_use(args, files: list) -> None:
    """``--storage-dir`` keeps one scenario's pages: two caches must not share them."""
    if getattr(args, "storage_dir", None) is not None and len(files) != 1:
        raise ScenarioError("--storage-dir takes exactly one scenario file")


def step_in_range(option: str, step: int, scenario) -> int:
    total = len(scenario.steps)
    if not 0 <= step <= total:
        raise ScenarioError(f"{option} must be between 0 and {total} (the scenario has {total} steps)", scenario.path)
    return step


def walk(scenarios, console) -> int:
    """Print every step of every scenario (the tour's walk-through: urc show --walk, and
    urc tui when stdout is not a terminal)."""
    from ..render.report import walk as walk_timeline

    timelines = [timeline_of(s) for s in scenarios]
    for timeline in timelines:
        walk_timeline(timeline, console)
    return EXIT_OK if all(t.passed for t in timelines) else EXIT_CHECK_FAILED


def component_sets() -> tuple[str, ...]:
    """The component lists urc fuzz and bench offer (``full,swa``): the base component
    alone, with each other component SGLang has, and with all of them. A component
    SGLang lacks (the sidecar) is a test's own, not offered here."""
    return tuple(",".join(components) for components in sglang_component_sets())
