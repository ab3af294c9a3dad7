"""The controller's storage tier (SGLang's HiCache L3): after a host backup's ack,
each node the ack published is written to a storage backend, page by page, keyed by
the node's page hashes (basics/page_hash.py), as v0.5.23's ``write_backup_storage`` does; a
node's host SWA and Mamba state go too, under its last hashes (staging.py).

A store holds a *host lock* on its node until the store's own ack (v0.5.23's
``ongoing_backup``), so host eviction cannot take pages being written: Full's on the
node, SWA's one window up from it, Mamba's on its state. With
``transfers = "immediate"`` a store is written and acknowledged within the op that
queued it (write-through: at the backup's ack; write-back: at the end of the eviction
that backed the node up). With ``"held"`` it stays in flight until the next
``check_hicache_events`` (a ``flush``): a flush writes and acknowledges the stores
queued before it, and the backups it acknowledges queue new ones for the next
flush, as SGLang's backup thread writes between two scheduler polls.

The tree never learns what storage holds: no node flag, only the host lock and a
``store`` mark (the ack ids) on the node and the upper parts split off it while the
store is in flight, so the ack releases the whole locked segment (v0.5.23 moves the
host lock's boundary up across a split). The backend is content-addressed: writing
pages already stored changes nothing but their recency.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Optional

import torch

from ..basics.base_component import FULL
from ..basics.errors import StorageDirError
from ..observe.events import Cause, EventKind
from .backends import BATCH_PAGES, Rule, StorageInjector, make_backend
from .backends.owned_dir import PrivateDir
from .prefetch import StoragePrefetch
from .staging import backup_parts, write_parts

if TYPE_CHECKING:
    from .hicache_config import StorageConfig
    from .owner import TierOwner
    from .backends import StorageBackend
    from ..tree.node import TreeNode

STORE_MARK = "store"  # metadata key on Full's data: the ack ids of the stores in flight on the node
PUBLISH_MARK = "publish"  # metadata key on Full's data: the held backups that copied the node's SWA (not its KV)


def make_storage_backend(config: StorageConfig) -> tuple[StorageBackend, Optional[PrivateDir]]:
    """The backend the config names, and the private directory a file backend without
    a path gets (removed with the tier). A directory it may not use, or cannot make,
    is a StorageDirError (a ValueError: bad input, nothing changed)."""
    scratch = None
    path = config.path
    try:
        if config.backend == "file" and path is None:
            scratch = PrivateDir()
            path = scratch.path
        backend = make_backend(config.backend, path, config.budget)
    except (OSError, ValueError) as exc:
        if scratch is not None:
            scratch.remove()
        raise StorageDirError(f"hicache storage: {exc}") from None
    if config.inject:  # a scenario's scripted failures and delays
        backend = StorageInjector(backend, [Rule.from_dict(dict(rule)) for rule in config.inject])
    return backend, scratch


class Store(NamedTuple):
    """A node's pages on their way to storage, until the store's ack."""

    ack: int  # its id; the node (and upper parts split off it) carry it in their store mark
    node: TreeNode  # the node the ack releases (a split keeps it as the lower part)
    keys: tuple[str, ...]  # the node's page hashes when the store was queued
    host_slots: torch.Tensor  # its host rows then (the host lock keeps them)
    cause: str  # why it was queued, in words ("after backup #3's ack")
    parts: tuple = ()  # its SWA and Mamba pages: (component, storage keys, host slots) each
    receipts: dict = {}  # the auxiliary host locks it took (the tree's lock_aux_host)


class StorageTier:
    """The storage tier of one cache's host tier (``HostTier.storage``)."""

    def __init__(self, cache: TierOwner, config: StorageConfig, held: bool) -> None:
        self.cache = cache
        self.config = config
        self.held = held
        self.backend, self._scratch = make_storage_backend(config)
        self.in_flight: list[Store] = []
        self.acks = 0  # store ids handed out
        self.stored_tokens = 0  # tokens acknowledged as written (v0.5.23's backuped tokens)
        cache.tree.enable_page_hashes()  # storage keys are the nodes' page hashes
        self.prefetch = StoragePrefetch(self)  # reading pages back (prefetch.py)

    def close(self) -> None:
        """Remove the private directory a file backend without a path got (a named one
        stays: its pages are kept)."""
        if self._scratch is not None:
            self._scratch.remove()

    def reset(self) -> None:
        """The cache was reset: nothing in flight (the locks went with the nodes). The
        store keeps its pages, as a restarted server keeps its storage directory."""
        self.in_flight.clear()
        self.prefetch.reset()

    # ---- queueing ----------------------------------------------------------------
    def queue(self, nodes: list[TreeNode], cause: str) -> None:
        """Queue a store of each node, in the order given (ancestors first): those
        still in the tree with a host copy and page hashes (v0.5.23's
        ``build_storage_backup_spec`` returns None otherwise). Each host-locks its
        node until its ack."""
        tree = self.cache.tree
        for node in nodes:
            host = node.data[0].host_value
            if tree.nodes.get(node.id) is not node or host is None or not node.page_hashes:
                continue
            self.acks += 1
            parts = backup_parts(self.cache.host, node)
            receipts = tree.lock_aux_host(node) if tree.host_components else {}
            store = Store(self.acks, node, tuple(node.page_hashes), host, cause, parts, receipts)
            tree.hold_host([node], +1)
            full = node.data[0]
            full.metadata[STORE_MARK] = full.metadata.get(STORE_MARK, ()) + (store.ack,)
            if tree._touched is not None:
                tree._touched.add(node.id)
            self.in_flight.append(store)
            self._emit(store, "queued", len(store.keys) * self.cache.page_size, cause)

    # ---- writing and acknowledging -----------------------------------------------------
    def settle(self, stores: Optional[list[Store]] = None) -> int:
        """Write ``stores`` (default: every store in flight), oldest first, and
        acknowledge each: its host lock is released. Returns how many completed."""
        done = list(self.in_flight) if stores is None else stores
        if not done:
            return 0
        ids = {store.ack for store in done}
        self.in_flight = [store for store in self.in_flight if store.ack not in ids]
        for store in done:
            written = self._write(store)
            self.stored_tokens += written
            self._release(store)
            self._emit(store, "acked", written, f"{written} of {len(store.keys) * self.cache.page_size} tokens stored")
        return len(done)

    def settle_immediate(self) -> int:
        """Immediate transfers: write what is in flight now (the end of an op's step)."""
        return 0 if self.held else self.settle()

    def _write(self, store: Store) -> int:
        """The backend writes: the SWA and Mamba pages first, then the KV in batches of
        128 pages; a KV batch that fails ends the store (the pages before it stay
        stored). Returns the KV tokens written."""
        ps, host = self.cache.page_size, self.cache.host
        if store.parts:
            write_parts(host, self.backend, store.parts)
        written = 0
        for start in range(0, len(store.keys), BATCH_PAGES):
            keys = store.keys[start : start + BATCH_PAGES]
            pages = [host.kv.page_bytes(store.host_slots[(start + i) * ps : (start + i + 1) * ps])
                     for i in range(len(keys))]
            results = self.backend.set(keys, pages)
            stored = sum(1 for ok in results if ok)
            self.cache.metrics.add("stored_pages_total", stored)
            self.cache.metrics.add("store_failed_pages_total", len(keys) - stored)
            if stored < len(keys):
                break
            written += len(keys) * ps
        return written

    def _release(self, store: Store) -> None:
        """Drop the store's mark and host lock from its node and the parts split off
        above it since (they carry the mark: the locked segment grew with them), and
        the auxiliary locks it took."""
        tree = self.cache.tree
        if store.receipts and tree.nodes.get(store.node.id) is store.node:
            tree.unlock_aux_host(store.node, store.receipts)
        tree.release_marked_host_lock(store.node, STORE_MARK, store.ack)

    # ---- views -------------------------------------------------------------------
    def stored_keys(self) -> list[str]:
        return self.backend.stored_keys()

    def _emit(self, store: Store, stage: str, tokens: int, detail: str) -> None:
        events = self.cache.events
        if events.enabled:
            with events.for_request(f"store #{store.ack}"):
                events.emit(EventKind.TRANSFER, FULL, store.node.id, Cause.REQUEST, tokens,
                            f"store {stage} (host -> storage): {detail}")

