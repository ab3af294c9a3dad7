"""What the requests room reads of the controller (``RequestOwner``), as a protocol:
the cache's public names a request's flows call, so the mixins here use no private
attribute of the controller and name no module above them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Protocol

if TYPE_CHECKING:
    import torch

    from ..basics.keys import RadixKey
    from ..basics.params import EvictParams, EvictResult, InsertParams, InsertResult, MatchPrefixParams, MatchResult
    from ..basics.request import Req
    from ..components.base import TreeComponent
    from ..observe.events import Cause, EventBus
    from ..pools import KVFingerprintBuffer, PagedAllocator
    from ..tiers.host import HostTier
    from ..tree.core import UnifiedTreeCore
    from ..tree.hooks import HookTable
    from ..tree.session_refs import SessionRefTracker


class RequestOwner(Protocol):
    """The controller as a request's flows see it."""

    # its parts
    tree: UnifiedTreeCore
    components: list[TreeComponent]
    by_name: dict[str, TreeComponent]
    hooks: HookTable  # which components each request hook runs on
    events: EventBus
    kv_pool: PagedAllocator
    kv_buffer: KVFingerprintBuffer
    host: Optional[HostTier]
    session_refs: SessionRefTracker
    requests: dict[str, Req]  # the running requests, by id
    # its settings
    page_size: int
    device: torch.device
    auto_evict: bool
    bigram_keys: bool  # EAGLE: the tree keys token pairs
    fingerprints: bool  # write_kv records KV fingerprints

    # the cache API (controller/unified_radix_cache.py, tiers/calls.py)
    def new_rid(self) -> str: ...

    def match_prefix(self, params: MatchPrefixParams | RadixKey) -> MatchResult: ...

    def insert(self, params: InsertParams) -> InsertResult: ...

    def alloc_kv(self, num_tokens: int, evict: Optional[bool] = None) -> torch.Tensor: ...

    def free_kv(self, values: list[torch.Tensor], cause: Cause = ..., node: Optional[int] = None,
                full_only: bool = False, trusted: bool = False) -> int: ...

    def write_kv(self, slots: torch.Tensor, tokens: list[int], start: int = 0) -> None: ...

    def shortfalls(self, num_tokens: int, states: int = 0) -> dict[str, int]: ...

    def check_capacity(self, num_tokens: int, mamba_states: int = 0, evict: Optional[bool] = None) -> None: ...

    def ensure_capacity(self, shorts: dict[str, int], pinned: dict[str, int], evict: bool) -> None: ...

    def evict_for_alloc(self, params: EvictParams) -> EvictResult: ...

    def require_host(self, call: str) -> HostTier: ...

    # a streaming session's part of a request's caching (sessions/streaming.py)
    def session_checkpoint(self, req: Req, up_to: int) -> bool: ...

    def keep_session_record(self, req: Req) -> bool: ...
