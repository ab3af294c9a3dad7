"""Run a scenario or trace straight into a store file (``urc run FILE --store RUN.urcdb``).

A JSONL trace is streamed (``scenarios.stream``) and every checked step goes to the
file as it runs, so neither the trace nor the timeline is ever whole in memory. A TOML
scenario is small: it is loaded as usual and stored the same way.

A new store is written in place: interrupted (Ctrl-C, a bad line further on, a crash),
it keeps every step that finished and says it stopped early. A store that replaces an
existing file (``--force``) is written beside it and takes its name only once the run
has finished: one that stops early is dropped, and the old file stays as it was.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Optional, TextIO

from ..scenarios.outputs import current_umask
from ..scenarios.scenario import Scenario, Step, load_scenario
from .runner import KEEP_EVERY, Runner, checked_loop
from .stored import DiskTimeline, StoreError, create_store

StepListener = Callable[[], None]


def remove_store(path: str) -> None:
    """A store file this run wrote and drops, with SQLite's side files."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.unlink(path + suffix)
        except FileNotFoundError:
            pass


def _beside(target: str) -> str:
    """A fresh file name beside ``target`` (never one that exists, nor a planted link)."""
    folder, name = os.path.split(os.path.abspath(target))
    fd, temp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".part")
    os.close(fd)
    return temp


def run_to_store(source: str, store_path: str, full_checks: bool = False, record: Optional[TextIO] = None,
                 kv_events: Optional[TextIO] = None, on_step: StepListener = lambda: None) -> DiskTimeline:
    """Check every step of ``source`` into a new store at ``store_path``; returns the
    store's timeline (open: the caller reports from it, then closes it)."""
    stream = None
    if source.endswith(".jsonl"):
        from ..scenarios.stream import open_trace

        stream = open_trace(source)
        scenario, steps = stream.scenario, stream.steps()
    else:
        scenario = load_scenario(source)
        steps = _with_last(scenario.steps)
        scenario = dataclasses.replace(scenario, steps=())
    runner = Runner(scenario, record=record, full_checks=full_checks, kv_events=kv_events)
    replacing = os.path.lexists(store_path)  # the caller allowed it (--force): written beside, renamed when done
    written = _beside(store_path) if replacing else store_path
    try:
        timeline = create_store(written, runner)
    except StoreError:  # not made: what is at the path stays, unless it is our replacement's file
        if replacing:
            remove_store(written)
        raise
    except BaseException:  # made but not started (an interrupt while its header was written): dropped
        remove_store(written)
        raise
    complete = False
    try:
        with checked_loop():
            for n, (step, last) in enumerate(steps, 1):
                runner.run_step(step, last=last)
                on_step()
                if n % KEEP_EVERY == 0:
                    gc.collect(1)
        complete = True
    finally:
        notices = stream.notices if stream is not None else []
        try:
            timeline.finish(complete, notices)
            timeline.scenario = _noticed(timeline.scenario, notices)
        finally:
            if stream is not None:
                stream.close()
            if replacing:
                _settle(timeline, written, store_path, complete)
    return timeline


def _settle(timeline: DiskTimeline, written: str, target: str, complete: bool) -> None:
    """A replacement takes the target's name when the run finished; else it is dropped."""
    if complete:
        os.chmod(written, 0o666 & ~current_umask())  # as a plain create would leave it (mkstemp: 0600)
        os.replace(written, target)
        timeline.store.file.path = target
    else:
        timeline.close()
        remove_store(written)



def _with_last(steps) -> Iterator[tuple[Step, bool]]:
    for i, step in enumerate(steps):
        yield step, i == len(steps) - 1


def _noticed(scenario: Scenario, notices) -> Scenario:
    return dataclasses.replace(scenario, notices=tuple(scenario.notices) + tuple(notices)) if notices else scenario
