"""Run a scenario or trace straight into a store file (``urc run FILE --store RUN.urcdb``).

A JSONL trace is streamed (``scenarios.stream``) and every checked step goes to the
file as it runs, so neither the trace nor the timeline is ever whole in memory. A TOML
scenario is small: it is loaded as usual and stored the same way. Interrupted (Ctrl-C,
a bad line further on), the store keeps every step that finished and says it stopped
early.
"""

from __future__ import annotations

import dataclasses
import gc
import os
from collections.abc import Callable, Iterator
from typing import Optional, TextIO

from ..scenarios.scenario import Scenario, Step, load_scenario
from .runner import KEEP_EVERY, Runner, checked_loop
from .stored import DiskTimeline, create_store

StepListener = Callable[[], None]


def remove_store(path: str) -> None:
    """An existing store the user chose to replace (--force), with SQLite's side files."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.unlink(path + suffix)
        except FileNotFoundError:
            pass


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
    timeline = create_store(store_path, runner)
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
        timeline.finish(complete, notices)
        timeline.scenario = _noticed(timeline.scenario, notices)
        if stream is not None:
            stream.close()
    return timeline


def _with_last(steps) -> Iterator[tuple[Step, bool]]:
    for i, step in enumerate(steps):
        yield step, i == len(steps) - 1


def _noticed(scenario: Scenario, notices) -> Scenario:
    return dataclasses.replace(scenario, notices=tuple(scenario.notices) + tuple(notices)) if notices else scenario
