"""What a component reads of the cache it serves and of that cache's config, written
down as protocols: the components room names no class of the rooms above it (the
controller and the config satisfy these by their attributes)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Optional, Protocol

if TYPE_CHECKING:
    import torch

    from ..basics.params import EvictParams
    from ..basics.request import Req
    from ..observe.eviction_batch import EvictionBatch
    from ..observe.events import Cause
    from ..pools.kv_buffer import KVFingerprintBuffer


class ConfigView(Protocol):
    """The config fields a component (and its host part's pool sizing) reads."""

    page_size: int
    kv_size: int
    sliding_window: Optional[int]
    mamba_size: Optional[int]
    extra: Mapping[str, Any]  # the components' own fields (``config_fields``)

    @property
    def swa_pool_size(self) -> int: ...


class CacheView(Protocol):
    """The cache as a component sees it: its config and device, the running requests,
    and the pool I/O its controller-side hooks call back into."""

    config: ConfigView
    device: torch.device
    auto_evict: bool  # an allocation evicts its shortfall first
    bigram_keys: bool  # EAGLE's token-pair keys
    kv_buffer: KVFingerprintBuffer
    requests: Mapping[str, Req]

    def kv_holders(self) -> Iterator[Req]: ...

    def evict_for_alloc(self, params: EvictParams) -> Any: ...

    def free_kv(self, values: list[torch.Tensor], cause: Cause = ..., node: Optional[int] = None,
                full_only: bool = False, trusted: bool = False) -> int: ...

    def free_batch(self, batch: EvictionBatch, cause: Cause) -> None: ...
