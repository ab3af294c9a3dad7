"""Deferred actions: the tree decides, the controller executes.

The tree core never touches a pool. Insert returns these records (and eviction
returns per-component free lists); ``UnifiedRadixCache`` applies them to the pools.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from .events import Cause


@dataclasses.dataclass(slots=True)
class FreeDeviceKV:
    """Return incoming KV slots (all components mapped from them) to the pools."""

    values: list[torch.Tensor]
    node: Optional[int] = None
    cause: Cause = Cause.DUPLICATE
    deferrable = True


@dataclasses.dataclass(slots=True)
class FreeDeviceKVFullOnly:
    """Return only the Full side: the SWA peers were already freed by the request."""

    values: list[torch.Tensor]
    node: Optional[int] = None
    cause: Cause = Cause.DUPLICATE
    deferrable = True


@dataclasses.dataclass(slots=True)
class ComponentAction:
    """An action routed to one component's ``apply_action`` (e.g. an SWA rebuild)."""

    component: str
    name: str
    node: Optional[int] = None
    payload: tuple = ()
    deferrable = False


Action = FreeDeviceKV | FreeDeviceKVFullOnly | ComponentAction
