"""Finding SGLang: the bridge's only way in, so a missing or different SGLang is one
clear line (exit 2), never an ImportError from deep inside a run."""

from __future__ import annotations

import logging
import sys
import warnings
from importlib import metadata
from types import SimpleNamespace
from typing import Callable, Optional

from ..model.scenarios.scenario import ScenarioError

SGLANG_VERSION = "0.5.23"  # the version our cache follows
CPU_TORCH = "torch==2.13.0"  # the CPU build `make bridge-setup` installs first
# CPU only: a plain `pip install sglang` pulls a CUDA torch, nvidia-* and triton wheels
INSTALL = (f"in a checkout, make bridge-setup (a CPU-only .venv-sglang); elsewhere, CPU only: pip install {CPU_TORCH} "
           f"--index-url https://download.pytorch.org/whl/cpu, then pip install --no-deps "
           f"-r tools/sglang-cpu-requirements.txt sglang=={SGLANG_VERSION} (a plain pip install sglang pulls a CUDA torch)")


class BridgeError(ScenarioError):
    """SGLang is missing, of another version, cannot be imported, or cannot express a
    scenario's config (exit code 2, like any bad input)."""


def installed_version() -> Optional[str]:
    """SGLang's installed version, read without importing it (None: not installed)."""
    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return None


def check_version(allow_version: bool = False, warn: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> str:
    """The installed SGLang version, refused unless it is the one we follow (or
    ``allow_version``, which only warns)."""
    found = installed_version()
    if found is None:
        raise BridgeError(f"needs SGLang {SGLANG_VERSION}: {INSTALL}")
    if found != SGLANG_VERSION:
        if not allow_version:
            raise BridgeError(
                f"found SGLang {found}, but the bridge follows SGLang {SGLANG_VERSION}: "
                f"install it CPU only ({INSTALL}), or pass --allow-version to run against {found} anyway"
            )
        warn(f"warning: running against SGLang {found}; the bridge follows {SGLANG_VERSION}, so differences may be version changes")
    return found


_API: Optional[SimpleNamespace] = None


def sglang_api(allow_version: bool = False) -> SimpleNamespace:
    """The SGLang names the bridge uses, imported once (SGLang's import takes seconds)."""
    global _API
    if _API is not None:
        return _API
    version = check_version(allow_version, warn=lambda line: None)  # the command has warned already
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SGLang's import-time notices about GPU-only kernels
            _API = _import(version)
    except Exception as exc:  # a broken install: say so in one line
        raise BridgeError(f"SGLang {version} is installed but cannot be imported: {type(exc).__name__}: {exc}") from None
    return _API


# name -> where SGLang keeps it
NAMES = {
    "torch": "torch",
    "Mamba2CacheParams": "sglang.srt.configs.mamba_utils", "Mamba2StateShape": "sglang.srt.configs.mamba_utils",
    "envs": "sglang.srt.environ",
    "FINISH_LENGTH": "sglang.srt.managers.schedule_batch", "Req": "sglang.srt.managers.schedule_batch",
    "FINISH_ABORT": "sglang.srt.managers.schedule_batch",
    "TokenToKVPoolAllocator": "sglang.srt.mem_cache.allocator",
    "PagedTokenToKVPoolAllocator": "sglang.srt.mem_cache.allocator.paged",
    "SWATokenToKVPoolAllocator": "sglang.srt.mem_cache.allocator.swa",
    "EvictParams": "sglang.srt.mem_cache.base_prefix_cache", "InsertParams": "sglang.srt.mem_cache.base_prefix_cache",
    "MatchPrefixParams": "sglang.srt.mem_cache.base_prefix_cache", "TreeLock": "sglang.srt.mem_cache.base_prefix_cache",
    "CacheInitParams": "sglang.srt.mem_cache.cache_init_params",
    "ensure_mamba_capacity": "sglang.srt.mem_cache.allocation",
    "match_kv_cache": "sglang.srt.mem_cache.common", "release_kv_cache": "sglang.srt.mem_cache.common",
    "backup_kv_cache": "sglang.srt.mem_cache.common", "restore_kv_cache": "sglang.srt.mem_cache.common",
    "discard_kv_cache_backup": "sglang.srt.mem_cache.common", "evict_from_tree_cache": "sglang.srt.mem_cache.common",
    "HybridLinearKVPool": "sglang.srt.mem_cache.memory_pool", "HybridReqToTokenPool": "sglang.srt.mem_cache.memory_pool",
    "MHATokenToKVPool": "sglang.srt.mem_cache.memory_pool", "ReqToTokenPool": "sglang.srt.mem_cache.memory_pool",
    "RadixKey": "sglang.srt.mem_cache.radix_cache",
    "SWAKVPool": "sglang.srt.mem_cache.swa_memory_pool",
    "ComponentType": "sglang.srt.mem_cache.unified_cache.component_type",
    "UnifiedRadixCache": "sglang.srt.mem_cache.unified_radix_cache",
    "SamplingParams": "sglang.srt.sampling.sampling_params",
    "SessionController": "sglang.srt.session.session_controller",
    "OpenSessionReqInput": "sglang.srt.managers.io_struct", "CloseSessionReqInput": "sglang.srt.managers.io_struct",
    "TokenizedGenerateReqInput": "sglang.srt.managers.io_struct", "SessionParams": "sglang.srt.managers.io_struct",
    "checkpoint_kv_cache": "sglang.srt.mem_cache.common", "get_parallel": "sglang.srt.runtime_context",
    "ServerArgs": "sglang.srt.server_args", "set_global_server_args_for_scheduler": "sglang.srt.server_args",
}


def _import(version: str) -> SimpleNamespace:
    import importlib

    import torch  # noqa: F401  (first, so torch's own start-up sees no stand-in)

    from .import_standins import install_if_missing

    api = SimpleNamespace(version=version, stand_ins=install_if_missing())
    # SGLang warns on what a scenario does on purpose (a second open, a rejected turn, a host pool
    # smaller than the device's) and that a CPU cannot time host copies; the bridge reports the
    # first as results, so its warnings would only be noise on our output
    _order_session_leaves()
    for name in ("sglang.srt.session", "sglang.srt.mem_cache.unified_cache.session_ref_tracker",
                 "sglang.srt.managers.schedule_batch", "sglang.srt.mem_cache.l2_transfer",
                 "sglang.srt.mem_cache.pool_host.base"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    for name, module in NAMES.items():
        loaded = importlib.import_module(module)
        setattr(api, name, loaded if name == module else getattr(loaded, name))
    return api


class _OrderedNodeSet(dict):
    """A set of tree nodes that iterates in insertion order (the set calls SGLang makes)."""

    def add(self, node) -> None:
        self[node] = None

    def remove(self, node) -> None:
        del self[node]


def _order_session_leaves() -> None:
    """SGLang keeps each session's frontier nodes in a set of nodes hashed by address, so
    a release walks them (and re-files their LRU entries) in an order no other process
    can reproduce. The bridge gives those sets insertion order, the order ours uses:
    one of the orders SGLang itself may take, and the same on every run."""
    from collections import defaultdict

    from sglang.srt.mem_cache.unified_cache.components.base import TreeComponent

    original = TreeComponent.reset_session_state
    if getattr(original, "ordered_by_bridge", False):
        return

    def reset_session_state(self) -> None:
        original(self)
        self._session_leaves = defaultdict(_OrderedNodeSet)

    reset_session_state.ordered_by_bridge = True
    TreeComponent.reset_session_state = reset_session_state
