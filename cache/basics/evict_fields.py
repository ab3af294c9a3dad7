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


def params_fields(amounts: Mapping[str, int]) -> dict[str, int]:
    """Per component -> per EvictParams field, for the components that have one."""
    return {_FIELDS[name]: n for name, n in amounts.items() if name in _FIELDS}


def result_fields(counts: Mapping[str, int]) -> dict[str, int]:
    """Per component -> per EvictResult field, for the components that have one."""
    return {f"{field}_evicted": n for field, n in params_fields(counts).items()}
