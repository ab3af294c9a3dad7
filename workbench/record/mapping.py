"""From a live cache's public calls to our scenario ops (schema 1): the names a
recording keeps, and the call as the ops' ``record`` functions read it.

Each op declares which SGLang calls it records and how (``workbench/model/ops``); its
mapping rules take plain values, so they are testable without SGLang. A call that has
no op of ours becomes a comment with the reason: nothing is dropped silently.

Names: every recorded match and insert gets a name (``m1``, ``i2`` …) for the node
it ended on, so a later ``inc_lock_ref`` on that node becomes ``lock`` of that
name; locks are named ``L1`` … and an unlock finds its lock by node and receipt.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Hashable, Optional, Union

from .request_calls import RequestTracker

Line = Union[dict, str]  # a step, or a comment (written as "# …")


@dataclasses.dataclass
class _OpenLock:
    name: str
    node: Any
    receipt: Hashable  # what the release will hand back (compared by equality)


class TraceMapper:
    """The names a recording has given: nodes (by the latest match or insert that
    ended there) and open locks (by node and receipt). Each op's ``record`` function
    (``workbench/model/ops``) writes its step through it."""

    def __init__(self, components: list[str], page_size: int = 1) -> None:
        self.components = components
        self.page_size = page_size
        self._count = 0
        self._node_names: dict[Any, str] = {}  # node id -> the latest match/insert name ending there
        self._open: list[_OpenLock] = []
        self.requests = RequestTracker()  # live requests written as request ops
        self.closed_sessions: set[str] = set()  # radix sessions the recording closed (session_calls.py)

    def new_name(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def name_node(self, node: Any, name: str) -> None:
        self._node_names[node] = name

    def node_name(self, node: Any) -> Optional[str]:
        return self._node_names.get(node)

    def open_lock(self, name: str, node: Any, receipt: Hashable) -> None:
        self._open.append(_OpenLock(name, node, receipt))

    def find_lock(self, node: Any, receipt: Hashable, keep: bool) -> Optional[str]:
        """The open lock on ``node`` with exactly this receipt (the latest such). No
        guessing: a lock taken before recording, or one whose lock op could not be
        written, must not release another lock on replay."""
        exact = [k for k, lock in enumerate(self._open) if lock.node == node and lock.receipt == receipt]
        if not exact:
            return None
        return self._open[exact[-1]].name if keep else self._open.pop(exact[-1]).name


def call_arg(args: tuple, kwargs: dict, index: int, name: str, default: Optional[Any] = None):
    """A call's argument, passed by position or by name."""
    if len(args) > index:
        return args[index]
    return kwargs.get(name, default)


@dataclasses.dataclass
class RecordedCall:
    """One SGLang cache call as the recorder saw it: what an op's ``record`` reads."""

    name: str
    args: tuple
    kwargs: dict
    result: Any
    before: Any = None  # what the op's ``record_before`` read before the call
    root_check: Any = None  # the cache's is_root

    def arg(self, index: int, name: str, default: Optional[Any] = None):
        return call_arg(self.args, self.kwargs, index, name, default)

    @staticmethod
    def tokens(key) -> list[int]:
        return [int(t) for t in key.raw_token_ids()]

    @staticmethod
    def hashable(receipt) -> Any:
        """A receipt's content, comparable after the caller rebuilt the object."""
        return repr(receipt)

    def is_root(self, node) -> bool:
        try:
            return bool(self.root_check(node))
        except Exception:
            return False


def state_expect(sizes: dict[str, tuple[int, int]]) -> dict[str, int]:
    """The periodic state check: each component's evictable and protected sizes (the
    tree's own counts; pool availability also counts what running requests hold
    outside the tree, which a replay does not recreate)."""
    out = {}
    for name, (evictable, protected) in sizes.items():
        out[f"{name}_evictable"] = evictable
        out[f"{name}_protected"] = protected
    return out
