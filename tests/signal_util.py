"""Signals raised inside a chosen call, for the tests of interrupts between steps:
``signal.raise_signal`` runs the handler before it returns, so each lands exactly there."""

from __future__ import annotations

import contextlib
import signal
from typing import Iterator

from cache import UnifiedRadixCache


@contextlib.contextmanager
def ctrl_c_raising() -> Iterator[None]:
    """Ctrl-C as a terminal's shell leaves it (a shell starting a job in the background
    makes it ignored, and an ignored one stays ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def signal_inside(monkeypatch, owner, name: str, signals: tuple, when) -> list:
    """Raise ``signals`` inside ``owner.name`` just after its first call whose result
    ``when`` accepts; returns a list that holds that call's result once it happened."""
    original, seen = getattr(owner, name), []

    def wrapped(*args, **kwargs):
        result = original(*args, **kwargs)
        if not seen and when(result):
            seen.append(result)
            for number in signals:
                signal.raise_signal(number)
        return result

    monkeypatch.setattr(owner, name, wrapped)
    return seen


def inside_an_insert_that_shared_a_prefix(monkeypatch, signals: tuple) -> list:
    """``signal_inside`` the first insert that found part of its key cached: the tree
    has freed that prefix's duplicate slots by then, so undoing the step there freed
    them twice, and that error replaced the interrupt."""
    return signal_inside(monkeypatch, UnifiedRadixCache, "insert", signals, lambda result: result.prefix_len > 0)
