"""The controller's host tier (SGLang's HiCache): it executes what the tree decides
about host copies — backups, host eviction, load-back — on the host pool.

Transfers complete when made (SGLang's behaviour on the CPU, where its streams are
synchronous): a backup is a copy of the device fingerprints into host slots, a load
the copy back into fresh device slots, so a loaded prefix verifies like any match.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from .host_config import HiCacheConfig
from .errors import CacheError
from .events import Cause, EventBus, EventKind
from .keys import as_key
from .params import MatchPrefixParams
from .pools.host_pool import HostKVPool

if TYPE_CHECKING:
    from .controller import UnifiedRadixCache
    from .keys import RadixKey
    from .tree_node import TreeNode


class LoadBackResult(NamedTuple):
    loaded: int  # tokens brought back to the device (0: below the threshold, or no host hit)
    host_hit_length: int  # the match's host part before the load
    last_device_node: int  # where the device prefix now ends


class HostTier:
    def __init__(self, cache: UnifiedRadixCache, config: HiCacheConfig) -> None:
        self.cache = cache
        self.config = config
        self.kv = HostKVPool(config.host_kv_size, cache.page_size)
        cache.tree.enable_host_tier(config.write_policy, config.write_through_threshold)

    def reset(self) -> None:
        self.kv.clear()

    # ---- backups -------------------------------------------------------------------
    def backup(self, nodes) -> bool:
        """Copy each node's Full KV to the host, root side first, taking host slots at
        once (host eviction covers a shortfall). False when the host cannot make room:
        the rest of the chain stays device-only."""
        tree = self.cache.tree
        for node in nodes:
            if tree.backed_up(node) or node.data[0].value is None or tree.nodes.get(node.id) is not node:
                continue
            need = self.kv.allocator.pages_for(node.length) * self.cache.page_size
            if need > self.kv.available_size():
                self.evict_host(need - self.kv.available_size())
                if need > self.kv.available_size():
                    return False
            host = self.kv.backup(self.cache.kv_buffer, node.data[0].value)
            tree.set_host_value(node, host)
            self._emit(EventKind.ALLOC, node.id, Cause.REQUEST, node.length)
        return True

    def before_device_eviction(self, node: TreeNode) -> None:
        """Write-back: a device leaf about to be evicted is backed up first (it is then
        demoted, not deleted); when the host cannot take it, it is deleted with its
        host-only descendants."""
        tree = self.cache.tree
        if self.config.write_policy != "write_back" or tree.backed_up(node):
            return
        if not self.backup([node]):
            for host in tree.drop_host_subtree(node):
                self._free(host, None, Cause.CASCADE)

    # ---- host eviction ---------------------------------------------------------------
    def evict_host(self, num_tokens: int) -> int:
        """Free host copies of host-only leaves, least recently used first, until
        ``num_tokens`` host tokens are free; returns the tokens freed."""
        if type(num_tokens) is not int or num_tokens < 0:
            raise CacheError(f"evict_host: num_tokens must be a non-negative int (got {num_tokens!r})")
        frees, freed = self.cache.tree.evict_host(num_tokens)
        for host in frees:
            self._free(host, None, Cause.CAPACITY)
        return freed

    def _free(self, host, node, cause: Cause) -> None:
        n = self.kv.free(host)
        self._emit(EventKind.FREE, node, cause, n)

    def _emit(self, kind: EventKind, node, cause: Cause, n: int) -> None:
        if self.cache.events.enabled:
            self.cache.events.emit(kind, "full", node, cause, n, "pool=full_host")

    # ---- load-back -------------------------------------------------------------------
    def load_back(self, key: RadixKey) -> LoadBackResult:
        """Match ``key``; when its host part reaches ``load_back_threshold``, copy the
        host-only nodes back to fresh device slots (evicting device KV for them, with
        the matched device prefix and the path's host copies locked meanwhile). When the
        device pool cannot cover it, nothing is loaded; the match's own effects (access
        times, a split) stay, as they do for any match."""
        cache, tree = self.cache, self.cache.tree
        match = cache.match_prefix(MatchPrefixParams(key))
        hit = match.host_hit_length
        if hit == 0 or hit < self.config.load_back_threshold:
            return LoadBackResult(0, hit, match.last_device_node)
        path = tree.host_path(tree.node_by_id(match.best_match_node))
        anchor = match.last_device_node
        receipt = tree.inc_lock_ref(anchor)  # eviction for the load must not take the prefix
        tree.hold_host(path, +1)  # nor (write-back: backups evict host data) the path itself
        try:
            cache.check_capacity(hit)
            slots = cache.alloc_kv(hit)
            start = 0
            for node in path:
                part = slots[start : start + node.length]
                self.kv.load(cache.kv_buffer, node.data[0].host_value, part)
                tree.restore_device(node, part)
                start += node.length
            for node in reversed(path):  # as SGLang's load ack does: from the deepest up
                tree.track_duplicate(node)
        finally:
            tree.hold_host(path, -1)
            tree.dec_lock_ref(anchor, receipt)
        return LoadBackResult(hit, hit, path[-1].id)

    # ---- sizes -----------------------------------------------------------------------
    def available_size(self) -> int:
        return self.kv.available_size()


class HostCalls:
    """The cache API of the host tier, mixed into UnifiedRadixCache."""

    host: HostTier | None
    events: EventBus

    def load_back(self, key: RadixKey) -> LoadBackResult:
        """Bring a match's host-only part back to the device (see HostTier.load_back)."""
        with self.events.op("load_back"):
            return self._host("load_back").load_back(as_key(key))

    def evict_host(self, num_tokens: int) -> int:
        """Free ``num_tokens`` host tokens (write-back: redundant copies first, then
        host-only leaves, least recent first)."""
        with self.events.op("evict_host"):
            return self._host("evict_host").evict_host(num_tokens)

    def host_available_size(self) -> int:
        return self._host("host_available_size").available_size()

    def _host(self, call: str) -> HostTier:
        if self.host is None:
            raise CacheError(f"{call} needs the host tier (config hicache)")
        return self.host
