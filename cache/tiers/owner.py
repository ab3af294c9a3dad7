"""What the tiers read of the cache that owns them (``TierOwner``: the controller) and
of each other (``HostSide``, ``StorageSide``), as protocols, so the tiers' modules
name no module above them and each refers back to its owner only by these."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Protocol

from ..basics.base_component import FULL

if TYPE_CHECKING:
    import torch

    from ..basics.params import EvictParams, EvictResult, MatchPrefixParams, MatchResult
    from ..components.base import TreeComponent
    from ..observe.events import Cause, EventBus
    from ..observe.metrics import CacheMetrics
    from ..pools import KVFingerprintBuffer, PagedAllocator
    from ..pools.host_pool import HostKVPool
    from ..tree.core import UnifiedTreeCore
    from .backends import StorageBackend
    from .hicache_config import HiCacheConfig, StorageConfig


class TierConfig(Protocol):
    """The part of the cache's configuration the tiers read."""

    hicache: Optional[HiCacheConfig]


class HostSide(Protocol):
    """The host tier as the storage tier and its staging see it (``cache.host``)."""

    cache: TierOwner
    kv: HostKVPool
    aux: dict

    def pool(self, name: str): ...

    def evict_host(self, num: int, component: str = FULL) -> int: ...


class StorageSide(Protocol):
    """The storage tier as its prefetches see it (``StoragePrefetch.tier``)."""

    cache: TierOwner
    config: StorageConfig
    held: bool
    backend: StorageBackend


class TierOwner(Protocol):
    """The controller's names the host and storage tiers use: its pools, tree, events
    and metrics, and the cache calls a tier makes (match, device eviction, frees)."""

    config: TierConfig
    page_size: int
    tree: UnifiedTreeCore
    components: list[TreeComponent]
    kv_pool: PagedAllocator
    kv_buffer: KVFingerprintBuffer
    events: EventBus
    metrics: CacheMetrics
    host: Optional[HostSide]

    def match_prefix(self, params: MatchPrefixParams) -> MatchResult: ...

    def evict_for_alloc(self, params: EvictParams) -> EvictResult: ...

    def ensure_capacity(self, shorts: dict[str, int], pinned: dict[str, int], evict: bool) -> None: ...

    def free_kv(self, values: list[torch.Tensor], cause: Cause = ..., node: Optional[int] = None,
                full_only: bool = False, trusted: bool = False) -> int: ...
