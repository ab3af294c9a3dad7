"""SWA's deferred actions: the tree's SWA decisions the controller applies through
this component's ``apply_action`` (see cache/observe/actions.py)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import torch

from ...observe.actions import ComponentAction
from ...observe.events import Cause


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class RebuildSWA(ComponentAction):
    """Give ``node`` SWA data: the SWA slots its Full slots ``source`` map to."""

    node: int
    source: torch.Tensor
    component: ClassVar[str] = "swa"
    cause: ClassVar[Cause] = Cause.WINDOW

    @property
    def tokens(self) -> int:
        return int(self.source.shape[0])

    def describe(self) -> str:
        return f"RebuildSWA: the node takes the SWA slots of its {self.tokens} Full slot(s)"


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class RecoverLockedSWA(ComponentAction):
    """Recover a tombstone whose Full KV is locked: ``kept`` (the node's Full slots)
    takes over the SWA slots of ``incoming``, whose Full side is then freed."""

    node: int
    kept: torch.Tensor
    incoming: torch.Tensor
    component: ClassVar[str] = "swa"
    cause: ClassVar[Cause] = Cause.WINDOW

    @property
    def tokens(self) -> int:
        return int(self.incoming.shape[0])

    def describe(self) -> str:
        return f"RecoverLockedSWA: the node keeps its locked Full slots and takes {self.tokens} incoming SWA slot(s)"
