"""Which EvictParams field a component's eviction count goes to (EvictResult's: the
same plus ``_evicted``). The fields are SGLang's names; which component owns one is a
fact its folder declares (``EVICT_FIELD``), which the component registry writes here
when it loads: this floor room names no component, and every cache has loaded it.
A component without a field counts in ``by_component`` only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

_FIELDS: dict[str, str] = {}  # component -> its EvictParams field


def declare(fields: Mapping[str, str]) -> None:
    """Record each component's field (the registry's call)."""
    _FIELDS.update(fields)


def params_field(component: str) -> Optional[str]:
    """The component's EvictParams field, or None."""
    return _FIELDS.get(component)


def result_field(component: str) -> Optional[str]:
    """The component's EvictResult field, or None."""
    field = _FIELDS.get(component)
    return None if field is None else f"{field}_evicted"
