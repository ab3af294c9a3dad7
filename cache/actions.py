"""Deferred actions: the tree decides, the controller executes.

The tree core never touches a pool. Insert returns these records (and eviction
returns an ``EvictionBatch``); ``UnifiedRadixCache`` applies them to the pools. One
frozen class per kind, so a handler reads named fields and dispatches on the type.

``deferrable`` says whether the insert may hold the action back to its end. An action
that is not (every ``ComponentAction``) is a barrier: the insert applies everything
pending at once, because its later steps read what the action sets.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

import torch

from .events import Cause


def _slots(values: list[torch.Tensor]) -> int:
    return sum(int(v.shape[0]) for v in values)


def _at(node: Optional[int], cause: Cause) -> str:
    return f"({cause.value}, node #{node})" if node is not None else f"({cause.value})"


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class FreeDeviceKV:
    """Return incoming KV slots (all components mapped from them) to the pools."""

    values: list[torch.Tensor]
    node: Optional[int] = None
    cause: Cause = Cause.DUPLICATE
    deferrable: ClassVar[bool] = True

    def describe(self) -> str:
        return f"free {_slots(self.values)} Full slot(s) and their peers' {_at(self.node, self.cause)}"


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class FreeDeviceKVFullOnly:
    """Return only the Full side: the SWA peers were already freed by the request."""

    values: list[torch.Tensor]
    node: Optional[int] = None
    cause: Cause = Cause.DUPLICATE
    deferrable: ClassVar[bool] = True

    def describe(self) -> str:
        return f"free {_slots(self.values)} Full slot(s) only {_at(self.node, self.cause)}"


class ComponentAction:
    """An action the controller routes to the ``apply_action`` of the component named
    by the subclass's ``component``."""

    __slots__ = ()
    component: ClassVar[str] = ""
    deferrable: ClassVar[bool] = False

    def describe(self) -> str:
        raise NotImplementedError


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class RebuildSWA(ComponentAction):
    """Give ``node`` SWA data: the SWA slots its Full slots ``source`` map to."""

    node: int
    source: torch.Tensor
    component: ClassVar[str] = "swa"

    def describe(self) -> str:
        return f"swa: node #{self.node} takes the SWA slots of its {int(self.source.shape[0])} Full slot(s)"


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class RecoverLockedSWA(ComponentAction):
    """Recover a tombstone whose Full KV is locked: ``kept`` (the node's Full slots)
    takes over the SWA slots of ``incoming``, whose Full side is then freed."""

    node: int
    kept: torch.Tensor
    incoming: torch.Tensor
    component: ClassVar[str] = "swa"

    def describe(self) -> str:
        n = int(self.incoming.shape[0])
        return f"swa: node #{self.node} keeps its locked Full slots and takes {n} incoming SWA slot(s)"


Action = FreeDeviceKV | FreeDeviceKVFullOnly | RebuildSWA | RecoverLockedSWA
