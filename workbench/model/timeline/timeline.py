"""The timeline: what every step of a run did, and the state after it.

This is the central model: the runner appends to it, and the report, ``urc show``,
the JSON output, the TUI and the SVG export only read it. A step's state is kept as
what the step changed (``states.StateStore``), so a run of thousands of steps on a
large tree costs what its steps changed, not steps × tree size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Optional

from cache.observe.events import Event
from cache.basics.violation import Violation

from .fmt import value_text
from ..scenarios.scenario import Scenario, Step
from .states import StateStore, TimelineState


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
    store: StateStore = dataclasses.field(repr=False, compare=False)
    full_check: bool = False  # the full invariant sweep ran after this step (else the incremental one)
    faults_fired: tuple[str, ...] = ()  # config faults that changed the cache's behaviour in this step
    kv_events: tuple[str, ...] = ()  # the KV events it published, in words (with enable_kv_cache_events)

    @property
    def index(self) -> int:
        return self.step.index

    @property
    def passed(self) -> bool:
        return not self.failures and not self.violations

    @property
    def state(self) -> TimelineState:
        """The state after this step."""
        return self.store.state(self.index)

    snapshot = state  # the name earlier readers used


StepListener = Callable[[StepRecord], None]


@dataclasses.dataclass
class Timeline:
    scenario: Scenario
    store: StateStore
    records: list[StepRecord] = dataclasses.field(default_factory=list)
    listeners: list[StepListener] = dataclasses.field(default_factory=list, repr=False)

    def add(self, record: StepRecord) -> None:
        self.records.append(record)
        for listener in self.listeners:
            listener(record)

    def on_step(self, listener: StepListener) -> Callable[[], None]:
        """Call ``listener`` with every step added from now on; returns an unsubscribe."""
        self.listeners.append(listener)
        return lambda: self.listeners.remove(listener) if listener in self.listeners else None

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.records)

    @property
    def first_failure(self) -> Optional[StepRecord]:
        return next((r for r in self.records if not r.passed), None)

    def failing(self) -> list[StepRecord]:
        """The steps that failed, in order (a stored timeline answers from its index)."""
        return [r for r in self.records if not r.passed]

    @property
    def initial(self) -> TimelineState:
        return self.store.state(0)

    @property
    def final(self) -> TimelineState:
        return self.store.state(len(self.records))

    def state_after(self, index: int) -> TimelineState:
        """The state after step ``index`` (1-based); 0 is the empty start."""
        return self.store.state(max(0, min(index, len(self.records))))

    def diff(self, a: int, b: int):
        """What changed from the state after step ``a`` to the state after step ``b``."""
        from .diff import diff_states

        return diff_states(self, a, b)

    def __len__(self) -> int:
        return len(self.records)
