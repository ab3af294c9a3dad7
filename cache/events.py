"""The event stream: every state change, typed, with the operation that caused it.

Observers (the workbench's timeline, tests) subscribe to an ``EventBus``. Emission sites
check ``bus.enabled`` before building a record, so a cache with no observer pays one
attribute read per site.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Optional


class EventKind(str, enum.Enum):
    ALLOC = "alloc"  # slots taken from a pool
    FREE = "free"  # slots returned to a pool
    ADD = "add"  # a new node (leaf) joined the tree
    SPLIT = "split"  # a node was cut in two; the new parent is ``node``
    DELETE = "delete"  # a node left the tree
    PROMOTE = "promote"  # LRU refresh / access-time bump
    LOCK = "lock"  # lock_ref went up on a node
    UNLOCK = "unlock"  # lock_ref went down on a node
    EVICT = "evict"  # a component's data left a node that is being deleted
    TOMBSTONE = "tombstone"  # a component's data left a node that stays in the tree
    CASCADE = "cascade"  # eviction of lower-priority data triggered by another component
    RECOVER = "recover"  # a tombstone got its data back
    COW = "cow"  # copy-on-write of a state slot
    SET = "set"  # a component value was attached to a node
    VERDICT = "verdict"  # where one component would end a match, and why (observed matches only)


class Cause(str, enum.Enum):
    REQUEST = "request"  # the op asked for it directly
    CAPACITY = "capacity"  # eviction to make room
    DUPLICATE = "duplicate"  # incoming slots the tree already held
    WINDOW = "window"  # slid out of the SWA window
    TAIL = "tail"  # unaligned tail of a key: a partial page is never cached
    CASCADE = "cascade"  # another component's eviction took this data along (``detail``: "from <it>")
    CLEANUP = "cleanup"  # an emptied ancestor removed after its last child


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    seq: int  # op sequence number (1-based, counted while observed)
    op: str  # public operation that caused it
    kind: EventKind
    component: Optional[str]  # "full", "swa", "mamba", or None for structural events
    node: Optional[int]  # node id
    cause: Cause
    tokens: int = 0  # tokens (or slots) affected
    detail: str = ""  # e.g. "from swa" for a cascade, "need 6" for a capacity eviction
    request: str = ""  # id of the request whose call caused it ("" outside request calls)

    def describe(self) -> str:
        where = f" node {self.node}" if self.node is not None else ""
        comp = f" {self.component}" if self.component else ""
        extra = f" ({self.detail})" if self.detail else ""
        n = f" {self.tokens}" if self.tokens else ""
        req = f" <{self.request}>" if self.request else ""
        return f"#{self.seq} {self.op}{req}: {self.kind.value}{comp}{where}{n} [{self.cause.value}]{extra}"


Observer = Callable[[Event], None]


class EventBus:
    __slots__ = ("observers", "enabled", "seq", "op", "request", "_depth")

    def __init__(self) -> None:
        self.observers: list[Observer] = []
        self.enabled = False
        self.seq = 0
        self.op = ""
        self.request = ""  # the running request-level call's request id, stamped on its events
        self._depth = 0

    def subscribe(self, observer: Observer) -> Callable[[], None]:
        """Add an observer; returns a function that removes it."""
        self.observers.append(observer)
        self.enabled = True

        def unsubscribe() -> None:
            if observer in self.observers:
                self.observers.remove(observer)
            self.enabled = bool(self.observers)

        return unsubscribe

    def begin(self, op: str) -> None:
        """Enter a public op; nested ops (insert inside cache_finished_req) keep the outer name."""
        if self._depth == 0:
            self.seq += 1
            self.op = op
        self._depth += 1

    def end(self) -> None:
        self._depth -= 1

    def enter_request(self, rid: str) -> str:
        """Stamp ``rid`` on every event until ``exit_request``, which gets the returned
        outer tag back (so a nested request call restores its caller's)."""
        outer, self.request = self.request, rid
        return outer

    def exit_request(self, outer: str) -> None:
        self.request = outer

    def begin_request(self, op: str, rid: str) -> str:
        """``begin`` a request-level op and ``enter_request`` its request."""
        self.begin(op)
        return self.enter_request(rid)

    def end_request(self, outer: str) -> None:
        self.exit_request(outer)
        self.end()

    def emit(
        self,
        kind: EventKind,
        component: Optional[str],
        node: Optional[int],
        cause: Cause,
        tokens: int = 0,
        detail: str = "",
    ) -> None:
        event = Event(self.seq, self.op or "?", kind, component, node, cause, tokens, detail, self.request)
        for observer in self.observers:
            observer(event)


class EventLog:
    """A simple observer that keeps every event; handy for tests and the runner."""

    def __init__(self, bus: EventBus) -> None:
        self.events: list[Event] = []
        self._unsubscribe = bus.subscribe(self.events.append)

    def take(self) -> list[Event]:
        out, self.events[:] = list(self.events), []
        return out

    def close(self) -> None:
        self._unsubscribe()
