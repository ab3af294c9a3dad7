"""Deferred actions: the tree decides, the controller executes.

The tree core never touches a pool. Insert returns these records (and eviction
returns an ``EvictionBatch``); ``UnifiedRadixCache`` applies them to the pools and, when
observed, reports each as an ``action`` event before its effects. One frozen class per
kind, so a handler reads named fields and dispatches on the type.

``deferrable`` says whether the insert may hold the action back to its end. An action
that is not (every ``ComponentAction``) is a barrier: the insert applies everything
pending at once, because its later steps read what the action sets.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

import torch

from ..basics.base_component import FULL
from .events import Cause


def _slots(values: list[torch.Tensor]) -> int:
    return sum(int(v.shape[0]) for v in values)


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class FreeDeviceKV:
    """Return incoming KV slots (all components mapped from them) to the pools."""

    values: list[torch.Tensor]
    node: Optional[int] = None
    cause: Cause = Cause.DUPLICATE
    deferrable: ClassVar[bool] = True
    component: ClassVar[str] = FULL
    full_only: ClassVar[bool] = False  # leave the peers' (SWA's) slots alone

    @property
    def tokens(self) -> int:
        return _slots(self.values)

    def describe(self) -> str:
        return f"FreeDeviceKV: free {self.tokens} Full slot(s) and their peers'"


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class BackupKV:
    """Copy these nodes' Full KV to the host tier, root side first (write-through: an
    insert's hit made ``node`` due; its ancestors without a copy come first)."""

    nodes: tuple
    node: Optional[int] = None
    cause: Cause = Cause.REQUEST
    deferrable: ClassVar[bool] = False  # a barrier, as in v0.5.23: copied before the insert commits
    component: ClassVar[str] = FULL

    @property
    def tokens(self) -> int:
        return sum(n.length for n in self.nodes)

    def describe(self) -> str:
        ids = ", ".join(f"#{n.id}" for n in self.nodes)
        return f"BackupKV: copy {self.tokens} token(s) of node(s) {ids} to the host"


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class FreeDeviceKVFullOnly(FreeDeviceKV):
    """Return only the Full side: the SWA peers were already freed by the request."""

    full_only: ClassVar[bool] = True

    def describe(self) -> str:
        return f"FreeDeviceKVFullOnly: free {self.tokens} Full slot(s), not their peers"


class ComponentAction:
    """An action the controller routes to the ``apply_action`` of the component named
    by the subclass's ``component``. Subclasses have a ``node`` field: the node their
    event names."""

    __slots__ = ()
    component: ClassVar[str] = ""
    cause: ClassVar[Cause] = Cause.REQUEST
    deferrable: ClassVar[bool] = False

    @property
    def tokens(self) -> int:
        """How many slots (or tokens) the action moves, for its event."""
        return 0

    def describe(self) -> str:
        raise NotImplementedError


Action = FreeDeviceKV | ComponentAction  # FreeDeviceKVFullOnly is a FreeDeviceKV
