"""The host tier's configuration (SGLang's HiCache), checked with the cache's."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Optional

from .config import MAX_POOL

WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")
TRANSFER_MODES = ("immediate", "held")


@dataclasses.dataclass(frozen=True)
class HiCacheConfig:
    """The host tier (SGLang's HiCache). ``write_through``: a new leaf is backed up on
    its first hit (insert); ``write_through_selective``: on its second; ``write_back``:
    when device eviction would drop it. ``host_kv_size`` (tokens) defaults to SGLang's
    size for hicache_ratio 2: twice the device pool plus one page; a match whose host part is shorter than
    ``load_back_threshold`` tokens is not loaded back (SGLang's default 10). ``transfers``: ``immediate``
    completes every copy within its op (SGLang on the CPU, polled every step); ``held``
    keeps each write-through backup and each load-back in flight — its node locked —
    until a ``flush`` (SGLang's ``check_hicache_events``), as a GPU stream would."""

    write_policy: str = "write_through"
    host_kv_size: Optional[int] = None
    host_mamba_size: Optional[int] = None  # states; default twice the device pool plus one (SGLang's)
    host_swa_size: Optional[int] = None  # SWA tokens; default as host_kv_size, from the SWA pool
    load_back_threshold: int = 10
    transfers: str = "immediate"

    @property
    def write_through_threshold(self) -> Optional[int]:
        """Hits before an insert backs a node up (None: only eviction does)."""
        return {"write_through": 1, "write_through_selective": 2}.get(self.write_policy)

    @classmethod
    def of(cls, fields: Mapping[str, Any], kv_size: int, page_size: int, mamba_size: Optional[int] = None,
           swa_size: Optional[int] = None) -> HiCacheConfig:
        unknown = set(fields) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown hicache field {sorted(unknown)[0]!r}; known: write_policy, host_kv_size, "
                             "host_mamba_size, host_swa_size, load_back_threshold, transfers")
        config = cls(**fields)
        if config.write_policy not in WRITE_POLICIES:
            raise ValueError(f"hicache write_policy must be one of {', '.join(WRITE_POLICIES)} (got {config.write_policy!r})")
        if config.transfers not in TRANSFER_MODES:
            raise ValueError(f"hicache transfers must be one of {', '.join(TRANSFER_MODES)} (got {config.transfers!r})")
        # SGLang sizes the host pool from hicache_ratio (default 2) plus one page
        size = _host_tokens("host_kv_size", config.host_kv_size, kv_size, page_size)
        swa = None
        if swa_size is None:
            if config.host_swa_size is not None:
                raise ValueError("hicache host_swa_size needs the swa component")
        else:
            swa = _host_tokens("host_swa_size", config.host_swa_size, swa_size, page_size)
        states = config.host_mamba_size
        if mamba_size is None:
            if states is not None:
                raise ValueError("hicache host_mamba_size needs the mamba component")
        else:
            states = 2 * mamba_size + 1 if states is None else states  # SGLang: the ratio's share plus one slot
            if isinstance(states, bool) or not isinstance(states, int) or not 0 < states <= MAX_POOL:
                raise ValueError(f"hicache host_mamba_size must be a positive int (got {states!r})")
        threshold = config.load_back_threshold
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 0:
            raise ValueError(f"hicache load_back_threshold must be a non-negative int (got {threshold!r})")
        return dataclasses.replace(config, host_kv_size=size, host_mamba_size=states, host_swa_size=swa)


def _host_tokens(field: str, size: Optional[int], device_size: int, page_size: int) -> int:
    """A host KV pool's size: given, or SGLang's for hicache_ratio 2 (twice the device
    pool plus one page)."""
    size = size if size is not None else (2 * device_size // page_size + 1) * page_size
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0 or size % page_size or size > MAX_POOL:
        raise ValueError(f"hicache {field} must be a positive multiple of page_size {page_size} (got {size!r})")
    return size
