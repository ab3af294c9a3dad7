"""Rules the components' own [config] fields share (each component's ``fields``
module uses them), free of torch so a config is checked before anything is built."""

from __future__ import annotations

from typing import Any


def flag(field: str, value: Any) -> bool:
    """A true-or-false field's value."""
    if not isinstance(value, bool):
        raise ValueError(f"{field} must be true or false (got {value!r})")
    return value
