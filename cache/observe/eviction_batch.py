"""``EvictionBatch``: the bookkeeping of one eviction, handed through the tree core and
the components instead of loose arguments.

The tree core never touches a pool, so what an eviction takes off the tree waits here
until the controller drains it; the per-component counts tell an eviction walk when
it has freed enough and become the ``EvictResult``; cause, trigger and need say why,
for the events the removals emit.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Optional

import torch

from .events import Cause


class EvictionBatch:
    """``frees``: component name -> device values awaiting the pools (drained, maybe
    several times, by the controller). ``counts``: component name -> units evicted so
    far (never drained). ``cause``: why the chosen nodes go (CAPACITY, or WINDOW for an
    early window release); ``trigger``: the component whose walk is choosing them,
    asked to free ``need`` units (0: no amount asked)."""

    __slots__ = ("frees", "counts", "cause", "trigger", "need", "detail")

    def __init__(self, names: Iterable[str], cause: Cause, trigger: Optional[str] = None, need: int = 0) -> None:
        self.frees: dict[str, list[torch.Tensor]] = {name: [] for name in names}
        self.counts: dict[str, int] = dict.fromkeys(self.frees, 0)
        self.cause = cause
        self.trigger = trigger
        self.need = need
        self.detail = ""  # what the removals' events say instead of the need (e.g. "cap 2")

    def free(self, name: str, value: torch.Tensor, units: int) -> None:
        """Record that ``name`` gave up ``value`` (``units`` of it) on some node."""
        self.frees[name].append(value)
        self.counts[name] += units

    def take_frees(self, name: str) -> list[torch.Tensor]:
        """The values ``name`` still has to return to its pool; the batch forgets them."""
        values = self.frees[name]
        if values:
            self.frees[name] = []
        return values

    def walk(self, trigger: str, need: int) -> None:
        """The next component's eviction walk starts: its removals report it."""
        self.trigger, self.need = trigger, need

    def __repr__(self) -> str:
        return f"EvictionBatch({self.cause.value}, trigger={self.trigger}, need={self.need}, counts={self.counts})"
