"""The SWA and Mamba components' own [config] fields: their defaults and the rule each
value must meet, free of torch. ``CacheConfig`` checks a given value by these rules when
it is made (a scenario's [config], ``urc fuzz --option``), so a bad value is refused
before the cache is built; the component resolves it by the same rule when it is.
A registered component's fields are checked by its ``check_config_value`` at build."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NO_CAP = -1  # mamba_max_states_per_path: no cap (v0.5.23's default)

SWA_FIELDS = {"swa_draft_window": 0, "swa_gates_prefix_match": True, "swa_free_out_of_window": True}
MAMBA_FIELDS = {"mamba_max_states_per_path": NO_CAP, "mamba_extra_buffer": None, "mamba_skip_decode_lock": False}


def flag(field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{field} must be true or false (got {value!r})")
    return value


def check_cap(value: Any) -> int:
    """-1 (off) or a positive int, as v0.5.23's server-args check demands."""
    if isinstance(value, bool) or not isinstance(value, int) or value == 0 or value < NO_CAP:
        raise ValueError(f"mamba_max_states_per_path must be -1 (no cap) or a positive int (got {value!r})")
    return value


def swa_field(field: str, value: Any, page_size: int) -> Any:
    if field == "swa_draft_window":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"swa_draft_window must be a non-negative int (got {value!r})")
        return value
    return flag(field, value)


def mamba_field(field: str, value: Any, page_size: int) -> Any:
    if field == "mamba_max_states_per_path":
        return check_cap(value)
    if field == "mamba_extra_buffer":
        if value is None:  # production's choice: on above page 1
            return page_size > 1
        if not flag(field, value) and page_size > 1:  # v0.5.23's MambaComponent asserts page 1 without it
            raise ValueError(f"mamba_extra_buffer false needs page_size 1 (got {page_size})")
        return value
    return flag(field, value)


RULES = {"swa": (SWA_FIELDS, swa_field), "mamba": (MAMBA_FIELDS, mamba_field)}


def check_given_fields(components: tuple[str, ...], extra: Mapping[str, Any], page_size: int) -> None:
    """Each given field of SWA or Mamba is one it declares, with a valid value."""
    from ..config.reference import did_you_mean

    for key, value in extra.items():
        for name in components:
            if name in RULES and key.startswith(f"{name}_"):
                fields, check = RULES[name]
                if key not in fields:
                    raise ValueError(f"unknown config field {key!r}{did_you_mean(key, fields)}; "
                                     f"{name}'s own fields: {', '.join(fields)}")
                check(key, value, page_size)
