"""The timeline: what every step of a run did, and the state after it.

This is the central model: the runner appends to it, and the report, ``urc show``,
the JSON output, the TUI and the SVG export only read it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from cache.events import Event
from cache.invariants import Violation
from cache.snapshot import CacheSnapshot

from .fmt import value_text
from .scenario import Scenario, Step


@dataclasses.dataclass(frozen=True)
class Failure:
    field: str
    expected: Any
    actual: Any

    def __str__(self) -> str:
        return f"{self.field}: expected {value_text(self.expected)}, got {value_text(self.actual)}"


@dataclasses.dataclass(frozen=True)
class StepRecord:
    step: Step
    result: Optional[dict[str, Any]]  # None when the op failed
    error: Optional[str]
    events: tuple[Event, ...]
    violations: tuple[Violation, ...]
    failures: tuple[Failure, ...]
    snapshot: CacheSnapshot

    @property
    def index(self) -> int:
        return self.step.index

    @property
    def passed(self) -> bool:
        return not self.failures and not self.violations


@dataclasses.dataclass
class Timeline:
    scenario: Scenario
    initial: CacheSnapshot
    records: list[StepRecord] = dataclasses.field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.records)

    @property
    def first_failure(self) -> Optional[StepRecord]:
        return next((r for r in self.records if not r.passed), None)

    def state_after(self, index: int) -> CacheSnapshot:
        """The snapshot after step ``index`` (1-based); 0 is the empty start."""
        if index <= 0:
            return self.initial
        return self.records[min(index, len(self.records)) - 1].snapshot

    def __len__(self) -> int:
        return len(self.records)
