"""The cache API of the host and storage tiers (v0.5.23's names), mixed into
``UnifiedRadixCache``: each call checks its arguments, names its op and hands over to
the tier, refusing when the config has no such tier."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, ContextManager, Optional

from ..basics.base_component import FULL
from ..basics.errors import CacheError
from ..basics.keys import as_key
from .host import HostTier, LoadBackResult
from .prefetch import PrefetchIssue, StoragePrefetch

if TYPE_CHECKING:
    from ..basics.keys import RadixKey
    from ..observe.events import EventBus


class HostCalls:
    """The cache API of the host tier, mixed into UnifiedRadixCache."""

    host: HostTier | None
    events: EventBus

    def load_back(self, key: RadixKey, mem_quota: Optional[int] = None) -> LoadBackResult:
        """Bring a match's host-only part back to the device (see HostTier.load_back)."""
        if mem_quota is not None and (type(mem_quota) is not int or mem_quota < 0):
            raise CacheError(f"load_back: mem_quota must be a non-negative int (got {mem_quota!r})")
        with self.events.op("load_back"):
            return self.require_host("load_back").load_back(as_key(key), mem_quota)

    def evict_host(self, num: int, component: str = FULL) -> int:
        """Free ``num`` host units of ``component`` (Full: tokens, write-back's
        redundant copies first, then host-only leaves, least recent first; Mamba:
        states, oldest host-only first)."""
        with self.events.op("evict_host"):
            return self.require_host("evict_host").evict_host(num, component)

    def host_available_size(self, component: str = FULL) -> int:
        host = self.require_host("host_available_size")
        if component != FULL and component not in host.aux:
            raise CacheError(f"host_available_size: no host pool for {component!r} (host tier components: "
                             f"{', '.join([FULL, *host.aux])})")
        return host.available_size(component)

    def check_hicache_events(self) -> int:
        """Complete the host tier's transfers in flight (SGLang's per-step poll);
        returns how many completed. Immediate transfers leave nothing to complete."""
        with self.events.op("check_hicache_events"):
            host = self.require_host("check_hicache_events")
            done = host.check_hicache_events()
            if host.storage is not None:  # and every prefetch in flight moves on (prefetch.py)
                done += host.storage.prefetch.pump()
            return done

    def scheduler_step(self) -> ContextManager[None]:
        """Calls made inside as one scheduler iteration (what ``check_hicache_events``
        polls after); a no-op scope without a host tier."""
        return contextlib.nullcontext() if self.host is None else self.host.scheduler_step()

    def require_host(self, call: str) -> HostTier:
        if self.host is None:
            raise CacheError(f"{call} needs the host tier (config hicache)")
        return self.host


class StorageCalls:
    """The cache API of the storage tier (v0.5.23's names), mixed into UnifiedRadixCache."""

    host: HostTier | None
    events: EventBus

    def prefetch_from_storage(self, rid: str, key) -> PrefetchIssue:
        """Start a prefetch of what storage holds of ``key`` after its match (the
        scheduler does this when a request arrives)."""
        if not isinstance(rid, str) or not rid:
            raise CacheError(f"prefetch_from_storage: the request id must be a non-empty string (got {rid!r})")
        with self.events.op("prefetch_from_storage"):
            return self.require_prefetch("prefetch_from_storage").prefetch_from_storage(rid, as_key(key))

    def check_prefetch_progress(self, rid: str) -> bool:
        """The admission poll: True when request ``rid`` may be scheduled (its prefetch
        ended, now by the stop policy or before), False while it waits."""
        with self.events.op("check_prefetch_progress"):
            return self.require_prefetch("check_prefetch_progress").check_prefetch_progress(rid)

    def pop_prefetch_loaded_tokens(self, rid: str) -> int:
        """Tokens request ``rid``'s ended prefetch put on the host (0 if none), once."""
        return self.require_prefetch("pop_prefetch_loaded_tokens").pop_prefetch_loaded_tokens(rid)

    def query_storage_hit_length(self, key) -> int:
        """Tokens storage holds of ``key`` after its match (the admission probe)."""
        return self.require_prefetch("query_storage_hit_length").query_storage_hit_length(as_key(key))

    def require_prefetch(self, call: str) -> StoragePrefetch:
        if self.host is None or self.host.storage is None:
            raise CacheError(f"{call} needs the storage tier (config hicache.storage)")
        return self.host.storage.prefetch

