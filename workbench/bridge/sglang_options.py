"""How a scenario's model options (issue 28: eviction policy, EAGLE, the Mamba and SWA
options) reach SGLang 0.5.23: some are ``CacheInitParams`` fields, some ``ServerArgs``
fields read through ``get_exec()``, some environment switches read at call time.

One function per place, each taking the scenario's [config]; ``SGLangSide`` spreads
them into what it builds and wraps every op in ``option_env``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


def init_params_options(config: dict) -> dict:
    """``CacheInitParams`` fields for the options (the tree reads these)."""
    return {"eviction_policy": config.get("eviction_policy", "lru"),
            "eviction_policy_config": _policy_config(config)}


def server_args_options(config: dict) -> dict:
    """``ServerArgs`` fields for the options (components read these via ``get_exec()``)."""
    return {"radix_eviction_policy": config.get("eviction_policy", "lru"),
            "radix_eviction_policy_config": _policy_config(config)}


def _policy_config(config: dict):
    """The policy's keyword arguments as a dict (a fuzz option spells a table as pairs)."""
    value = config.get("eviction_policy_config")
    return dict(value) if value else None


def mamba_extra_buffer(config: dict) -> bool:
    """Whether SGLang's Mamba pool keeps the extra buffer: ours decides the same way."""
    return "mamba" in config["components"] and config.get("page_size", 1) > 1


@contextlib.contextmanager
def option_env(sg, config: dict) -> Iterator[None]:
    """SGLang's environment switches the options set, held while an op runs."""
    with contextlib.ExitStack() as stack:
        yield
