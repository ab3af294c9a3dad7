"""The controller's host tier (SGLang's HiCache): it executes what the tree decides
about host copies — backups, host eviction, load-back — on the host pool.

A backup is a copy of the device fingerprints into host slots, a load the copy back
into fresh device slots, so a loaded prefix verifies like any match. With
``transfers = "immediate"`` each completes within its op (SGLang on the CPU, where the
scheduler polls every step). With ``"held"`` a write-through backup and a load-back
stay *in flight* until ``check_hicache_events`` (the scenario op ``flush``): the
node is device-locked meanwhile (and a load's path host-locked), exactly the
bookkeeping SGLang keeps until a transfer's ack. The bytes are copied when the
transfer is queued — a stream runs its copies in order, so nothing reads them early;
what stays open is the locks and the ack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Optional

from .host_config import HiCacheConfig
from .errors import CacheError
from .events import Cause, EventBus, EventKind
from .keys import as_key
from .params import MatchPrefixParams
from .pools.host_pool import HostKVPool

if TYPE_CHECKING:
    from .controller import UnifiedRadixCache
    from .keys import RadixKey
    from .params import IncLockRefResult
    from .tree_node import TreeNode


class LoadBackResult(NamedTuple):
    loaded: int  # tokens brought back to the device (0: below the threshold, or no host hit)
    host_hit_length: int  # the match's host part before the load
    last_device_node: int  # where the device prefix now ends


class Transfer(NamedTuple):
    """A copy in flight (``transfers = "held"``) until its ack."""

    kind: str  # "backup" (device -> host) or "load" (host -> device)
    ack: int  # its id; the nodes in it carry (kind, ack) until the ack
    node: TreeNode  # the node the ack names (a split keeps it as the lower part)
    tokens: int
    receipt: IncLockRefResult  # the device lock held until the ack
    host_held: bool  # a load: every marked node is host-locked until the ack

    @property
    def mark(self) -> tuple[str, int]:
        return (self.kind, self.ack)


class HostTier:
    def __init__(self, cache: UnifiedRadixCache, config: HiCacheConfig) -> None:
        self.cache = cache
        self.config = config
        self.held = config.transfers == "held"
        self.kv = HostKVPool(config.host_kv_size, cache.page_size)
        self.in_flight: list[Transfer] = []
        self.acks = 0  # transfer ids handed out
        cache.tree.enable_host_tier(config.write_policy, config.write_through_threshold)

    def reset(self) -> None:
        self.kv.clear()
        self.in_flight.clear()

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
            if self.held and self.config.write_policy != "write_back":  # write-back drains its own ack
                self._hold("backup", node, node.length, tree.inc_lock_ref(node.id), [node])
        return True

    # ---- transfers in flight -----------------------------------------------------------
    def _hold(self, kind: str, node: TreeNode, tokens: int, receipt: IncLockRefResult, marked: list[TreeNode]) -> None:
        self.acks += 1
        transfer = Transfer(kind, self.acks, node, tokens, receipt, kind == "load")
        self.in_flight.append(transfer)
        self.cache.tree.mark_transfer(marked, transfer.mark)
        self._emit_transfer(transfer, "queued")

    def check_hicache_events(self) -> int:
        """Acknowledge every transfer in flight, oldest first: release its locks (a
        load's nodes then join write-back's redundant copies, deepest first, as
        SGLang's load ack does). Returns how many completed."""
        tree = self.cache.tree
        done, self.in_flight = self.in_flight, []
        for transfer in done:
            marked = tree.clear_transfer(transfer.node, transfer.mark)  # deepest first
            self._emit_transfer(transfer, "completed")
            tree.dec_lock_ref(transfer.node.id, transfer.receipt)
            if transfer.host_held:
                tree.hold_host(marked, -1)
                for node in marked:
                    tree.track_duplicate(node)
        return len(done)

    def _emit_transfer(self, transfer: Transfer, stage: str) -> None:
        if self.cache.events.enabled:
            way = "device -> host" if transfer.kind == "backup" else "host -> device"
            self.cache.events.emit(EventKind.TRANSFER, "full", transfer.node.id, Cause.REQUEST, transfer.tokens,
                                   f"{transfer.kind} {stage} ({way})")

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
        except BaseException:
            tree.hold_host(path, -1)
            tree.dec_lock_ref(anchor, receipt)
            raise
        tree.dec_lock_ref(anchor, receipt)
        if self.held:  # the loaded nodes stay locked on both tiers until the ack
            self._hold("load", path[-1], hit, tree.inc_lock_ref(path[-1].id), path)
        else:  # acknowledged at once: what check_hicache_events would release
            tree.hold_host(path, -1)
            for node in reversed(path):  # as SGLang's load ack does: from the deepest up
                tree.track_duplicate(node)
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

    def check_hicache_events(self) -> int:
        """Complete the host tier's transfers in flight (SGLang's per-step poll);
        returns how many completed. Immediate transfers leave nothing to complete."""
        with self.events.op("check_hicache_events"):
            return self._host("check_hicache_events").check_hicache_events()

    def _host(self, call: str) -> HostTier:
        if self.host is None:
            raise CacheError(f"{call} needs the host tier (config hicache)")
        return self.host
