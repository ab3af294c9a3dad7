"""Drives a cache the way a scheduler does, one scenario op at a time, keeping the
names a scenario refers to (matches, locks, requests).

Each op is the sequence of calls a scheduler would make (allocate, write KV, insert,
free the tail …), so a scenario reads like the scheduler code it reproduces; those
calls live with the op's declaration in ``ops/``.
"""

from __future__ import annotations

import dataclasses
from array import array
from collections.abc import Callable
from typing import Any, Optional

from cache import CacheError, RadixKey, UnifiedRadixCache
from cache.basics.params import IncLockRefResult, MatchResult
from cache.basics.request import Req

from .. import ops


class RunError(CacheError):
    """A name the scenario refers to does not exist at run time (only reachable from a
    step that expects an error: load-time checks catch the rest)."""


@dataclasses.dataclass
class MatchHandle:
    node: int
    prefix_len: int
    key: RadixKey  # packed bytes, not a list of ints: held handles add no work to the GC
    result: Optional[MatchResult]  # None for a named insert


@dataclasses.dataclass
class LockHandle:
    node: int
    receipt: IncLockRefResult


class CacheDriver:
    """The names a scenario has defined (matches, locks, requests) and the cache they
    live on; each op's executor (``ops/``) reads and updates them."""

    def __init__(self, cache: UnifiedRadixCache) -> None:
        self.cache = cache
        self.matches: dict[str, int] = {}  # name -> node id: the key and the MatchResult (its slots
        # tensor) stay with ``last_match`` only, so a trace of a million named matches holds ints
        self.locks: dict[str, LockHandle] = {}
        self.released: dict[str, LockHandle] = {}  # kept so a second unlock reaches the cache
        self.reqs: dict[str, Req] = {}
        self.finished: dict[str, Req] = {}
        self.retracted: dict[str, Req] = {}  # retracted requests: restore or abort them (ops/retraction.py)
        self.last_match: Optional[MatchHandle] = None
        self._packed: Optional[Callable[[str], Optional[bytes]]] = None  # the running step's (``run``)

    def run(self, op: str, fields: dict[str, Any],
            packed: Optional[Callable[[str], Optional[bytes]]] = None) -> Optional[dict[str, Any]]:
        """``packed``: the step's token fields as its check packed them
        (``Step.packed_tokens``), so an op hands them to the cache without packing them
        again."""
        self.last_match = None
        spec = ops.get(op)
        if spec is None:
            raise RunError(f"unknown op {op!r}")
        self._packed = packed
        try:
            with self.cache.scheduler_step():  # one scenario step: SGLang's side polls after it
                return spec.run(self, fields)
        finally:
            self._packed = None

    def token_ids(self, fields: dict[str, Any], name: str):
        """A token field as the cache should take it: the running step's packed ids as an
        ``array('I')`` (the cache takes those in one C pass and still checks each id) while
        the field is the list the step's check packed, else the field itself."""
        data = self._packed(name) if self._packed is not None else None
        if data is None:
            return fields[name]
        ids = array("I")
        ids.frombytes(data)
        return ids

    @staticmethod
    def refused(message: str) -> RunError:
        return RunError(message)

    # ---- names ---------------------------------------------------------------------------
    def name_match(self, name: Optional[str], node: int, prefix_len: int, key: RadixKey,
                   result: Optional[MatchResult]) -> MatchHandle:
        if name is not None:
            self.matches[name] = node
        return MatchHandle(node, prefix_len, key, result)

    def match_named(self, name: str) -> int:
        """The node a named match ended at."""
        node = self.matches.get(name)
        if node is None:
            raise RunError(f"unknown match name {name!r}")
        return node

    def hold_lock(self, name: str, node: int, receipt: IncLockRefResult) -> None:
        self.locks[name] = LockHandle(node, receipt)
        self.released.pop(name, None)

    def lock_named(self, name: str) -> LockHandle:
        handle = self.locks.get(name) or self.released.get(name)
        if handle is None:
            raise RunError(f"unknown lock name {name!r}")
        return handle

    def release_lock(self, name: str) -> None:
        self.released[name] = self.locks.pop(name)

    def request_named(self, name: str) -> Req:
        req = self.reqs.get(name) or self.retracted.get(name) or self.finished.get(name)
        if req is None:
            raise RunError(f"unknown request {name!r}")
        return req

    # ---- state read-back -------------------------------------------------------------
    def node_of(self, match_name: str) -> Optional[int]:
        return self.matches.get(match_name)
