"""How a scenario's model options (issue 28: eviction policy, EAGLE, the Mamba and SWA
options) reach SGLang 0.5.23: some are ``CacheInitParams`` fields, some ``ServerArgs``
fields read through ``get_exec()``, some environment switches read at call time.

One function per place, each taking the scenario's [config]; ``SGLangSide`` spreads
them into what it builds and wraps every op in ``option_env``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..model.ops.spec import stateful, windowed


def init_params_options(config: dict) -> dict:
    """``CacheInitParams`` fields for the options (the tree reads these)."""
    out = {"eviction_policy": config.get("eviction_policy", "lru"), "eviction_policy_config": _policy_config(config)}
    if windowed(config["components"]):  # the SWA options (retain window = max(window, draft))
        out["draft_swa_window"] = config.get("swa_draft_window", 0)
        out["swa_gates_prefix_match"] = config.get("swa_gates_prefix_match", True)
    if config.get("is_eagle"):  # the tree core turns it off itself when Mamba is a component
        out["is_eagle"] = True
    return out


def server_args_options(config: dict) -> dict:
    """``ServerArgs`` fields for the options (components read these via ``get_exec()``)."""
    out = {"radix_eviction_policy": config.get("eviction_policy", "lru"),
           "radix_eviction_policy_config": _policy_config(config)}
    if stateful(config["components"]):  # MambaComponent reads the cap at construction
        out["mamba_max_states_per_path"] = check_mamba_cap(config.get("mamba_max_states_per_path", -1))
    if config.get("is_eagle"):  # production derives CacheInitParams.is_eagle from it
        out["speculative_algorithm"] = "EAGLE"
    return out


def _policy_config(config: dict):
    """The policy's keyword arguments as a dict (a fuzz option spells a table as pairs)."""
    value = config.get("eviction_policy_config")
    return dict(value) if value else None


def check_mamba_cap(cap: int) -> int:
    """SGLang's own server-args check of the cap (-1 or a positive int)."""
    from sglang.srt.arg_groups.mamba_hook import handle_mamba_backend
    from sglang.srt.server_args import ServerArgs

    handle_mamba_backend(ServerArgs(model_path="dummy", mamba_max_states_per_path=cap))
    return cap


def mamba_extra_buffer(config: dict) -> bool:
    """Whether SGLang's Mamba pool keeps the extra buffer: ours decides the same way."""
    if not stateful(config["components"]):
        return False
    return bool(config.get("mamba_extra_buffer", config.get("page_size", 1) > 1))


@contextlib.contextmanager
def option_env(sg, config: dict) -> Iterator[None]:
    """SGLang's environment switches the options set, held while an op runs."""
    with contextlib.ExitStack() as stack:
        if stateful(config["components"]):  # read at each checkpoint's re-lock
            stack.enter_context(sg.envs.SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK.override(
                bool(config.get("mamba_skip_decode_lock", False))))
        if windowed(config["components"]):  # read at each checkpoint
            stack.enter_context(sg.envs.SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS.override(
                bool(config.get("swa_free_out_of_window", True))))
        yield
