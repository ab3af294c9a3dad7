"""The event stream: every state change, typed, with the operation that caused it.

Observers (the workbench's timeline, tests) subscribe to an ``EventBus``. Emission sites
check ``bus.enabled`` before building a record, so a cache with no observer pays one
attribute read per site; a public op wraps its body in ``with bus.op(name):``, which
hands out a shared do-nothing scope when nobody observes.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import NamedTuple, Optional


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
    ACTION = "action"  # the tree handed the controller a deferred action (``detail``: which, and what)
    BACKUP = "backup"  # a node's Full KV was copied to the host tier
    DEMOTE = "demote"  # device eviction kept a backed-up node as host-only
    LOAD = "load"  # a host-only node got device KV again (load-back, or an insert over it)
    HOST_EVICT = "host_evict"  # a host-only node's host copy was evicted (the node goes)
    TRANSFER = "transfer"  # a held host-tier copy was queued or completed (``detail``: which)
    SESSION_REF = "session_ref"  # a session's coverage moved a node's session_ref (``detail``: session, new count)
    SESSION_LEAF = "session_leaf"  # a node became or stopped being a session's frontier (``detail``: which)
    SLOT = "slot"  # a streaming session's slot took, lent, kept, handed back or released its record


class Cause(str, enum.Enum):
    REQUEST = "request"  # the op asked for it directly
    CAPACITY = "capacity"  # eviction to make room
    DUPLICATE = "duplicate"  # incoming slots the tree already held
    WINDOW = "window"  # slid out of the SWA window
    TAIL = "tail"  # unaligned tail of a key: a partial page is never cached
    STOP = "stop"  # KV past a request's stop (finished_len): nothing can match it
    CASCADE = "cascade"  # another component's eviction took this data along (``detail``: "from <it>")
    CLEANUP = "cleanup"  # an emptied ancestor removed after its last child
    RETRACT = "retract"  # a retracted request's host backup: taken, restored or discarded
    SESSION = "session"  # a session did it: a finish tagged its leaf, a deleted tag receded upward, or a
    # streaming session's record was rewound by a later turn or released on close
    SESSION_CLOSE = "session_close"  # release_radix_session let go of a closed session's tags
    ABORT = "abort"  # an aborted streaming turn took its session's record back
    PATH_CAP = "path_cap"  # mamba_max_states_per_path dropped a shallower state of the path (``detail``: "cap N")


class Event(NamedTuple):
    """One change and its cause (a named tuple: the cache emits several per op while
    observed, and a tuple is built three times faster than a frozen dataclass)."""

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
    __slots__ = ("observers", "enabled", "seq", "current_op", "request", "_depth")

    def __init__(self) -> None:
        self.observers: list[Observer] = []
        self.enabled = False
        self.seq = 0
        self.current_op = ""  # the running public op's name, stamped on its events
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

    def op(self, name: str, request: Optional[str] = None) -> OpScope | Unobserved:
        """``with bus.op(name, request=rid):`` runs a block as public op ``name`` (a
        nested op keeps the outer name and sequence number) and, given ``request``,
        stamps that request id on the block's events. Unobserved: a shared no-op."""
        if not self.enabled:
            return UNOBSERVED
        return OpScope(self, name, request)

    def for_request(self, rid: str) -> OpScope | Unobserved:
        """``with bus.for_request(rid):`` stamps ``rid`` on the block's events without
        an op of its own, for a call that only runs other ops (a decode step)."""
        if not self.enabled:
            return UNOBSERVED
        return OpScope(self, None, rid)

    def begin(self, op: str) -> None:
        """Enter a public op; nested ops (insert inside release_kv_cache) keep the outer name."""
        if self._depth == 0:
            self.seq += 1
            self.current_op = op
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

    def emit(
        self,
        kind: EventKind,
        component: Optional[str],
        node: Optional[int],
        cause: Cause,
        tokens: int = 0,
        detail: str = "",
    ) -> None:
        event = Event(self.seq, self.current_op or "?", kind, component, node, cause, tokens, detail, self.request)
        for observer in self.observers:
            observer(event)


class OpScope:
    """What ``EventBus.op`` hands out while observed: begins the op (when named) and
    enters its request on entry, and undoes both, innermost first, on exit."""

    __slots__ = ("_bus", "_name", "_request", "_outer_request")

    def __init__(self, bus: EventBus, name: Optional[str], request: Optional[str]) -> None:
        self._bus = bus
        self._name = name
        self._request = request
        self._outer_request = ""

    def __enter__(self) -> None:
        if self._name is not None:
            self._bus.begin(self._name)
        if self._request is not None:
            self._outer_request = self._bus.enter_request(self._request)

    def __exit__(self, *exc_info) -> bool:
        if self._request is not None:
            self._bus.exit_request(self._outer_request)
        if self._name is not None:
            self._bus.end()
        return False


class Unobserved:
    """What ``EventBus.op`` hands out while nobody observes: one shared scope that does
    nothing, so an unobserved op allocates nothing."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info) -> bool:
        return False


UNOBSERVED = Unobserved()


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
