"""Mamba's own [config] fields, their defaults and the rule each value must meet, free
of torch: the config checks a given value by ``check`` when it is made (so a bad one
is refused before a cache is built), and the component resolves it by the same rule."""

from __future__ import annotations

from typing import Any

from ..field_rules import flag

NO_CAP = -1  # mamba_max_states_per_path: no cap (v0.5.23's default)

# the model options: the per-path cap (-1: off), the extra buffer (None: on above page 1,
# as production decides), and SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK
# the model fields of CacheConfig this component cannot do without: the state pool's slots
REQUIRED = ("mamba_size",)

FIELDS = {"mamba_max_states_per_path": NO_CAP, "mamba_extra_buffer": None, "mamba_skip_decode_lock": False}


def check_cap(value: Any) -> int:
    """-1 (off) or a positive int, as v0.5.23's server-args check demands."""
    if isinstance(value, bool) or not isinstance(value, int) or value == 0 or value < NO_CAP:
        raise ValueError(f"mamba_max_states_per_path must be -1 (no cap) or a positive int (got {value!r})")
    return value


def check(field: str, value: Any, page_size: int) -> Any:
    """``value`` for ``field`` (one of ``FIELDS``), checked: the value the cache uses."""
    if field == "mamba_max_states_per_path":
        return check_cap(value)
    if field == "mamba_extra_buffer":
        if value is None:  # production's choice: on above page 1
            return page_size > 1
        if not flag(field, value) and page_size > 1:  # v0.5.23's MambaComponent asserts page 1 without it
            raise ValueError(f"mamba_extra_buffer false needs page_size 1 (got {page_size})")
        return value
    return flag(field, value)
