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

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple, Optional

import torch

from ..basics.base_component import FULL
from .hicache_config import HiCacheConfig
from ..basics.errors import CacheError, PoolExhaustedError
from ..observe.kv_events import CPU
from ..observe.events import Cause, EventKind
from ..basics.params import EvictParams, MatchPrefixParams
from ..pools.host_pool import HostKVPool
from .load_room import alloc_for_load, evict_for_refused_load
from .storage import PUBLISH_MARK, StorageTier

if TYPE_CHECKING:
    from .owner import TierOwner
    from ..basics.keys import RadixKey
    from ..basics.params import IncLockRefResult
    from ..tree.node import TreeNode


class LoadBackResult(NamedTuple):
    loaded: int  # tokens brought back to the device (0: below the threshold, or no host hit)
    host_hit_length: int  # the match's host part before the load
    last_device_node: int  # where the device prefix now ends


class Transfer(NamedTuple):
    """A copy until its ack: a held one across steps, until a flush; an immediate one
    until the op that made it ends."""

    kind: str  # "backup" (device -> host) or "load" (host -> device)
    ack: int  # its id; the nodes in it carry (kind, ack) until the ack
    node: TreeNode  # the node the ack names (a split keeps it as the lower part)
    tokens: int
    receipt: Optional[IncLockRefResult]  # the device lock held until the ack (held transfers)
    host_locks: Optional[dict]  # a load: its auxiliary host locks, held until the ack
    full_path: bool  # a load that brought Full KV: its marked nodes are host-locked until the ack
    published: tuple = ()  # a backup: the other nodes whose SWA it copied (their store follows its ack)
    anchor_held: bool = False  # a load with no Full KV: its anchor's Full host copy is locked until the ack

    @property
    def mark(self) -> tuple[str, int]:
        return (self.kind, self.ack)


class HostTier:
    def __init__(self, cache: TierOwner, config: HiCacheConfig) -> None:
        self.cache = cache
        self.config = config
        self.held = config.transfers == "held"
        self.kv = HostKVPool(config.host_kv_size, cache.page_size)
        self.in_flight: list[Transfer] = []
        self.acks = 0  # transfer ids handed out
        self.step_depth = 0  # open scheduler steps (scheduler_step)
        cache.tree.enable_host_tier(config.write_policy, config.write_through_threshold)
        # each other component's host pool, from its host part, in name order (Mamba's before SWA's, as SGLang)
        self.aux = {c.name: c.make_host_pool(config.host_sizes[c.name])
                    for c in sorted(cache.tree.host_components, key=lambda c: c.name)}
        cache.tree.backup_before_tombstone = self._backup_before_tombstone
        self.storage = None if config.storage is None else StorageTier(cache, config.storage, self.held)
        self.published: list[TreeNode] = []  # write-back: the nodes the last backup copied (its store's)

    def reset(self) -> None:
        self.kv.clear()
        for pool in self.aux.values():
            pool.clear()
        self.in_flight.clear()
        if self.storage is not None:
            self.storage.reset()

    def pool(self, name: str):
        return self.kv if name == FULL else self.aux[name]

    # ---- backups -------------------------------------------------------------------
    def backup(self, nodes) -> bool:
        """Copy each node's data to the host, root side first: Full KV (unless it has a
        copy) and each auxiliary component's device data without one. Host slots are
        taken at once (Full: host eviction covers the shortfall; an auxiliary pool
        gets one host eviction of its whole need); when any pool cannot make room the
        node is backed up not at all and the rest of the chain stays as it is."""
        tree, cache = self.cache.tree, self.cache
        written = True
        for node in nodes:
            if tree.nodes.get(node.id) is not node or node.data[0].value is None:
                continue
            full = None if tree.backed_up(node) else node.data[0].value
            aux = [(c, ns) for c in tree.host_components if (ns := c.backup_nodes(node))]
            if full is None and not aux:
                continue
            taken = self._take_host_slots(full, aux)
            if taken is None:
                written = False
                break
            if full is not None:
                self.kv.copy_in(cache.kv_buffer, full, taken[FULL])
                tree.set_host_value(node, cache.components[0], taken[FULL])
            for component, copied in aux:
                host, i, start = taken[component.name], component.index, 0
                values = [n.data[i].value for n in copied]
                self.aux[component.name].copy_in(component.device_store, _cat(values), host[: _total(values)])
                for n, value in zip(copied, values):
                    tree.set_host_value(n, component, host[start : start + value.shape[0]])
                    start += value.shape[0]
            for name, slots in taken.items():
                self._emit(EventKind.ALLOC, name, node.id, Cause.REQUEST, int(slots.shape[0]))
                cache.metrics.add(f"{name}_backed_up_total", int(slots.shape[0]))
            extra = tuple(dict.fromkeys(n for _, copied in aux for n in copied if n is not node))
            if self.config.write_policy != "write_back":  # write-back drains its own ack
                self._hold("backup", node, node.length, self._transfer_lock(node) if self.held else None, [node],
                           published=extra)
            else:
                self.published = [*extra, node]
                if tree.kv_events.enabled:  # its ack is now: the host copy is published (the tree's clear_transfer)
                    tree.kv_events.store(node, CPU)
        self.drain()
        return written

    def _take_host_slots(self, full, aux) -> Optional[dict]:
        taken = {}
        if full is not None:
            need = self.kv.allocator.pages_for(int(full.shape[0])) * self.cache.page_size
            if need > self.kv.available_size():
                self.evict_host(need - self.kv.available_size())
                if need > self.kv.available_size():
                    return None
            taken[FULL] = self.kv.allocator.alloc(int(full.shape[0]))
        for component, copied in sorted(aux, key=lambda cn: cn[0].name):
            pool = self.aux[component.name]
            need = pool.allocator.pages_for(_total([n.data[component.index].value for n in copied]))
            need *= pool.allocator.page_size
            if pool.available_size() < need:
                self.evict_host(need, component.name)  # SGLang asks for the whole need, once
            if pool.available_size() < need:
                for name, slots in taken.items():  # refused whole: give back what this node took
                    self.pool(name).allocator.free(slots, trusted=True)
                return None
            taken[component.name] = pool.allocator.alloc(need)
        return taken

    # ---- transfers in flight -----------------------------------------------------------
    def _hold(self, kind: str, node: TreeNode, tokens: int, receipt: Optional[IncLockRefResult],
              marked: list[TreeNode], host_locks: Optional[dict] = None, full_path: bool = False,
              published: tuple = (), anchor_held: bool = False) -> None:
        self.acks += 1
        transfer = Transfer(kind, self.acks, node, tokens, receipt, host_locks, full_path, published, anchor_held)
        self.in_flight.append(transfer)
        self.cache.tree.mark_transfer(marked, transfer.mark)
        if published and self.storage is not None:  # a split passes the mark up, as v0.5.23 re-lists the parts
            self.cache.tree.add_mark(published, PUBLISH_MARK, transfer.ack)
        if self.held:
            self._emit_transfer(transfer, "queued")

    def _transfer_lock(self, node: TreeNode, kind: str = "backup") -> IncLockRefResult:
        """The device lock a held transfer keeps, its events named for the transfer."""
        with self.cache.events.for_request(f"{kind} #{self.acks + 1}"):
            return self.cache.tree.inc_lock_ref(node.id)

    def end_of_op(self) -> None:
        """Immediate transfers are acknowledged when the op that made them ends (as the
        scheduler polls after each step): until then a node copied by this op counts
        as in flight, e.g. it takes no second, incremental backup. In an open scheduler
        step they wait for the step's end."""
        if not self.held and not self.step_depth and (self.in_flight or (self.storage is not None and self.storage.in_flight)):
            self.check_hicache_events()

    @contextlib.contextmanager
    def scheduler_step(self) -> Iterator[None]:
        """Several calls made as one scheduler step: what they copy stays in flight (a
        store's node host-locked) until the step ends, as SGLang acknowledges it at its
        next poll, after the step's insert has split the nodes it locks."""
        self.step_depth += 1
        try:
            yield
        finally:
            self.step_depth -= 1
            if not self.step_depth:
                self.end_of_op()

    def check_hicache_events(self) -> int:
        """Acknowledge every transfer in flight, oldest first: release its locks (a
        load's nodes then join write-back's redundant copies, deepest first, as
        SGLang's load ack does). With a storage tier a backup's ack queues a store
        of each node it published, ancestors first; the stores queued before this
        call are written and acknowledged (immediate: all). Returns how many
        transfers and stores completed."""
        tree, storage = self.cache.tree, self.storage
        ready = list(storage.in_flight) if storage is not None and self.held else None
        done, self.in_flight = self.in_flight, []
        for transfer in done:
            marked = tree.clear_transfer(transfer.node, transfer.mark)  # deepest first
            if self.held:
                self._emit_transfer(transfer, "completed")
            if transfer.receipt is not None:
                with self.cache.events.for_request(f"{transfer.kind} #{transfer.ack}"):
                    tree.dec_lock_ref(transfer.node.id, transfer.receipt)
            if storage is not None and transfer.kind == "backup":  # v0.5.23: after the ack's unlock
                extra = [n for node in transfer.published for n in tree.take_mark(node, PUBLISH_MARK, transfer.ack)]
                storage.queue(ancestors_first([*marked, *extra]), f"after backup #{transfer.ack}'s ack")
            if transfer.host_locks is not None:  # a load
                tree.unlock_aux_host(transfer.node, transfer.host_locks)
                if transfer.full_path or transfer.anchor_held:  # its Full nodes, with split-off upper parts
                    tree.hold_host(marked, -1)
                if transfer.full_path:
                    for node in marked:
                        tree.track_duplicate(node)
        return len(done) + (storage.settle(ready) if storage is not None else 0)

    def _emit_transfer(self, transfer: Transfer, stage: str) -> None:
        if self.cache.events.enabled:
            way = "device -> host" if transfer.kind == "backup" else "host -> device"
            self.cache.events.emit(EventKind.TRANSFER, FULL, transfer.node.id, Cause.REQUEST, transfer.tokens,
                                   f"{transfer.kind} {stage} ({way})")

    def before_device_eviction(self, node: TreeNode) -> bool:
        """Write-back: a device leaf about to be evicted is backed up first (it is then
        demoted, not deleted); when the host cannot take it, it is deleted with its
        host-only descendants, unless one of them is locked or in a transfer: then it
        stays on the device (False). True: the eviction goes on."""
        tree = self.cache.tree
        if self.config.write_policy != "write_back" or tree.backed_up(node):
            return True
        if self.backup([node]):
            tree.track_duplicate(node)  # its ack: on both tiers until the demotion right after
            if self.storage is not None:  # write-back acks at once: the store follows
                self.storage.queue(ancestors_first(self.published), "after its write-back backup")
            return True
        if not tree.drop_host_subtree(node):
            return False
        self.drain()
        return True

    def _backup_before_tombstone(self, node: TreeNode, component) -> None:
        """Write-back: back ``node`` up before it loses ``component``'s device data,
        making host room for the component's whole share of it first."""
        need = sum(component.value_len(n) for n in component.backup_nodes(node))
        if self.aux[component.name].available_size() < need:
            self.evict_host(need, component.name)
        if self.backup([node]):
            self.cache.tree.track_duplicate(node)
            if self.storage is not None:
                self.storage.queue(ancestors_first(self.published), "after its write-back backup")

    # ---- host eviction ---------------------------------------------------------------
    def evict_host(self, num: int, component: str = FULL) -> int:
        """Free host copies until ``num`` units of ``component`` are free (Full:
        tokens; write-back takes redundant copies first); returns the units freed."""
        if type(num) is not int or num < 0:
            raise CacheError(f"evict_host: the amount must be a non-negative int (got {num!r})")
        if component != FULL and component not in self.aux:
            raise CacheError(f"evict_host: no host copies of {component!r} (host tier components: "
                             f"{', '.join([FULL, *self.aux])})")
        freed = self.cache.tree.evict_host(num, component)
        self.drain()
        return freed

    def drain(self) -> None:
        """Return the host slots the tree let go of to their pools."""
        frees = self.cache.tree.host_frees
        while frees:
            name, slots = frees.pop()
            n = self.pool(name).allocator.free(slots, trusted=True)  # only ever slots these pools handed out
            self.cache.metrics.add(f"{name}_host_evicted_total", n)
            self._emit(EventKind.FREE, name, None, Cause.CAPACITY, n)

    def _emit(self, kind: EventKind, name: str, node, cause: Cause, n: int) -> None:
        if self.cache.events.enabled:
            self.cache.events.emit(kind, name, node, cause, n, f"pool={name}_host")

    # ---- load-back -------------------------------------------------------------------
    def load_back(self, key: RadixKey, mem_quota: Optional[int] = None) -> LoadBackResult:
        """Match ``key`` and bring its host part back to the device: the host-only Full
        nodes down to the best match, and what each auxiliary component needs there
        from the host (Mamba: the best match's state; SWA: the host-only SWA within
        one window of it). A Full part below ``load_back_threshold`` is not loaded
        unless auxiliary data comes too, and none when its Full tokens and those its
        prefix lock newly protects exceed ``mem_quota`` (SGLang's admission budget).
        Device room is made by eviction, with the
        best match locked and the host copies read host-locked meanwhile; the device
        pools are checked first, and when they cannot cover it the load is refused
        (PoolExhaustedError) before anything changes but the match's own effects
        (access times, a split) and the host LRU places of the copies it locked. ``loaded`` counts every token below the old
        device prefix, as SGLang's does."""
        return self.load_back_at(self.cache.match_prefix(MatchPrefixParams(key)), mem_quota)

    def load_back_at(self, match, mem_quota: Optional[int] = None, req=None) -> LoadBackResult:
        """v0.5.23's ``load_back(node, mem_quota, req)`` for a match already made. With
        a request (admission, the requests room's load_back.py) each component first
        prepares it (``prepare_load_back``: Mamba gives the request its own state
        slot when the best match's state is on the host only; the load then copies
        the state there too) and is told afterwards whether the load went through
        (``finalize_load_back``: a load called off gives that slot back)."""
        tree = self.cache.tree
        best = tree.node_by_id(match.best_match_node)
        path = tree.host_path(best)
        aux = [(c, ns) for c in tree.host_components if (ns := c.load_back_nodes(best))]
        hit = match.host_hit_length
        if not path and not aux:  # nothing on the host: v0.5.23's init_load_back does not try
            return LoadBackResult(0, hit, match.last_device_node)
        kv_tokens = sum(node.length for node in path)
        # v0.5.23's load_back: host-lock what it reads (write-back: backups evict host
        # data), then lock the best match itself (Full: its path; SWA: one window up
        # from it; Mamba: that node only, so the device prefix's own state stays
        # evictable), and only then decide; a refusal unlocks (host LRU: MRU end)
        # Full: its host path; with none, v0.5.23 still host-locks the anchor (a device
        # node) when its Full copy is on the host, and under write-back even without one
        held = path or ([best] if best.data[0].host_value is not None or self.config.write_policy == "write_back"
                        else [])
        tree.hold_host(held, +1)
        host_locks = tree.lock_aux_host(best)
        receipt = tree.inc_lock_ref(best.id, host_only=True)

        def unlock() -> None:
            tree.dec_lock_ref(best.id, receipt)
            tree.unlock_aux_host(best, host_locks)
            tree.hold_host(held, -1)

        preps, success = {}, False
        try:
            for component in tree.host_components:  # v0.5.23: after the lock, before the transfers are built
                preps[component.name] = component.prepare_load_back(best, req)
        except BaseException:
            unlock()
            self._finalize(preps, req, False)
            raise
        try:
            if (kv_tokens < max(1, self.config.load_back_threshold) and not aux) or (
                    mem_quota is not None and kv_tokens + receipt.delta > mem_quota):
                unlock()
                return LoadBackResult(0, hit, match.last_device_node)
            try:
                slots, taken = alloc_for_load(self.cache, kv_tokens, aux, req)
            except PoolExhaustedError:
                evict_for_refused_load(self.cache, kv_tokens, aux, req)
                unlock()
                return LoadBackResult(0, hit, match.last_device_node)  # v0.5.23: False (the request recomputes)
            except BaseException:
                unlock()
                raise
            self._commit_load(path, aux, slots, taken, req)
            success = True
        finally:
            self._finalize(preps, req, success)
        tree.dec_lock_ref(best.id, receipt)
        loaded = 0
        node, top = best, tree.node_by_id(match.last_device_node)
        while node is not top and node is not tree.root:
            loaded += node.length
            node = node.parent
        # held: the loaded nodes stay locked on both tiers until the ack; immediate: acked now
        lock = self._transfer_lock(best, "load") if self.held else None
        self._hold("load", best, loaded, lock, path or [best], host_locks, bool(path), anchor_held=bool(held) and not path)
        if req is None:  # an admission's load is acknowledged when the admission ends (load_back.py)
            self.end_of_op()
        self.drain()
        return LoadBackResult(loaded, hit, best.id)

    def _finalize(self, preps: dict, req, success: bool) -> None:
        for component in self.cache.tree.host_components:
            if component.name in preps:
                component.finalize_load_back(req, preps[component.name], success)

    def _commit_load(self, path, aux, slots, taken, req) -> None:
        """Copy the host data into the slots taken for it and put it on the nodes."""
        cache, tree = self.cache, self.cache.tree
        start = 0
        for node in path:
            part = slots[start : start + node.length]
            self.kv.load(cache.kv_buffer, node.data[0].host_value, part)
            tree.restore_device(node, part)
            start += node.length
        cache.metrics.add("full_loaded_total", start)
        for component, nodes in aux:
            values = component.commit_load(nodes, taken[component.name], req)
            cache.metrics.add(f"{component.name}_loaded_total", sum(int(v.shape[0]) for v in values))
            for node, value in zip(nodes, values):
                self.aux[component.name].load(component.device_store, node.data[component.index].host_value, value)
                tree.set_component_value(node.id, component.name, value)
            component.after_load(nodes, req)

    # ---- sizes -----------------------------------------------------------------------
    def available_size(self, component: str = FULL) -> int:
        return self.pool(component).available_size()


def ancestors_first(nodes: list) -> list:
    """Each node once, ancestors first (v0.5.23 stores a backup's nodes by depth)."""
    def depth(node) -> int:
        d = 0
        while node.parent is not None:
            node, d = node.parent, d + 1
        return d

    return sorted(dict.fromkeys(nodes), key=depth)


def _cat(values: list):
    return values[0] if len(values) == 1 else torch.cat(values)


def _total(values: list) -> int:
    return sum(int(v.shape[0]) for v in values)
