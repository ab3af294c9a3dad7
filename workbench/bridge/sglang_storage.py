"""SGLang 0.5.23's storage tier (HiCache L3) on the bridge's SGLang side, on the CPU.

For a scenario whose ``hicache`` has a ``storage`` table, SGLang's host tier is built
with its real file backend (``hicache_storage_backend = "file"``) in a fresh temporary
directory, and its real storage path runs: the write-through ack's
``write_backup_storage``, the controller's ``write_storage`` queue, ``_page_backup`` in
batches of 128 pages, and the ack drain that releases the host lock. What stands in
for what needs a server, and why:
 * ranks: its storage config reads the tensor-parallel ranks, so the bridge writes one
   rank (``tp_rank = 0`` …) into its parallel context;
 * pinned memory: a host pool's dummy page is pinned, which needs a driver; off;
 * threads: the controller's storage threads (backup, prefetch, I/O, sync) are never
   started. ``pump`` runs the backup thread's loop body until its queue is empty, so
   every run is deterministic. Where ours acknowledges (``check_hicache_events``),
   SGLang's side does the same: immediate transfers, after every op, poll -> pump ->
   poll (the first poll's write-through acks queue the stores, the pump writes them,
   the second poll acks them); a held ``flush`` is pump -> poll (the stores queued
   before it are written and acked, the backups it acks queue the next ones).

Compared after every state comparison: the keys in storage (the file names' page
hashes, the rank suffix stripped, against ours ``stored_keys()``), the stores in
flight (``ongoing_backup`` against ours) and the Full host locks the stores hold per
node (a held load-back host-locks its whole path in ours, only its node in SGLang: those
are not compared).
Prefetch (reading storage back) is bridged in sglang_prefetch.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
import weakref
from typing import Optional

from .canonical import Difference, node_ident, our_tokens, their_tokens

STORE_DIR_ENV = "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"  # wins over ServerArgs' file_storage_path


def unbridged_storage_field(config: dict):
    """The ``hicache.storage`` field the bridge cannot run on SGLang's side (None: none):
    a byte budget (SGLang's pages are another size) or a failure rule (its injector is
    random; delay rules are bridged, sglang_prefetch.py)."""
    storage = (config.get("hicache") or {}).get("storage") or {}
    if any(dict(rule).get("outcome") != "delay" for rule in storage.get("inject") or ()):
        return "inject"
    return "budget" if storage.get("budget") else None


def server_args_fields(config: dict) -> dict:
    """ServerArgs fields for a scenario's storage tier ({} without one)."""
    storage = (config.get("hicache") or {}).get("storage")
    if not storage:
        return {}
    unbridged = unbridged_storage_field(config)
    if unbridged:
        from .sglang_env import BridgeError

        raise BridgeError(f"hicache.storage {unbridged} is not bridged yet (SGLang's pages are another size; "
                          "its failure injector is random: only delay rules are bridged)")
    extra = {"prefetch_threshold": storage.get("prefetch_threshold", 256)}
    return dict(hicache_storage_backend="file", hicache_storage_prefetch_policy=storage.get("prefetch_policy", "best_effort"),
                hicache_storage_backend_extra_config=json.dumps(extra))


class _NeverStarted:
    """A thread the bridge never starts: ``pump`` runs its loop body instead."""

    def __init__(self, *args, **kwargs) -> None:
        self.target = kwargs.get("target")

    def start(self) -> None:
        return None

    def join(self, timeout=None) -> None:
        return None

    def is_alive(self) -> bool:
        return False


class _Threading:
    """The ``threading`` module as SGLang's controllers see it while the bridge builds
    them: everything real but ``Thread``."""

    Thread = _NeverStarted

    def __getattr__(self, name):
        return getattr(threading, name)


class StorageSide:
    """SGLang's storage tier of one bridge ``HostTier``."""

    def __init__(self, config: dict) -> None:
        self.dir = tempfile.mkdtemp(prefix="urc-bridge-storage-")
        # removed by close(), or else when collected or at exit: never left behind
        self._remove_dir = weakref.finalize(self, shutil.rmtree, self.dir, ignore_errors=True)
        self.config = config
        self.cache = None
        self.prefetch = None  # its prefetches (sglang_prefetch.py), once attached

    @classmethod
    def for_config(cls, config: dict) -> Optional[StorageSide]:
        return cls(config) if server_args_fields(config) else None

    @contextlib.contextmanager
    def building(self):
        """While ``init_hicache`` runs: one rank, the store directory, no threads."""
        import sglang.srt.managers.cache_controller as controller
        import sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller as hybrid
        from sglang.srt.runtime_context import get_parallel

        get_parallel().override_permanently(tp_rank=0, pp_rank=0, attn_tp_rank=0, attn_cp_rank=0, attn_dp_rank=0)
        modules = (controller, hybrid)
        saved = [module.threading for module in modules]
        before = os.environ.get(STORE_DIR_ENV)
        os.environ[STORE_DIR_ENV] = self.dir
        for module in modules:
            module.threading = _Threading()
        try:
            yield
        finally:
            for module, original in zip(modules, saved):
                module.threading = original
            if before is None:
                del os.environ[STORE_DIR_ENV]
            else:
                os.environ[STORE_DIR_ENV] = before

    def attach(self, cache, pools: dict) -> None:
        self.cache = cache
        if not cache.enable_storage:
            from .sglang_env import BridgeError

            raise BridgeError("SGLang built its host tier without the storage backend")
        for pool in pools.values():
            pool.pin_memory = False  # its dummy page would be pinned: no driver here
        from .sglang_prefetch import PrefetchSide

        self.prefetch = PrefetchSide(cache, self.config)

    def close(self) -> None:
        """Remove the store directory (SGLangSide.close, on every way out of a bridge run)."""
        self._remove_dir()

    # ---- the backup thread, run synchronously ---------------------------------------------
    def pump(self) -> int:
        """The backup thread's loop body until its queue is empty; returns the writes."""
        cc = self.cache.cache_controller
        ran = 0
        while not cc.backup_queue.empty():
            operation = cc.backup_queue.get()
            if operation is None:
                continue
            if not cc.backup_skip:
                cc._page_backup_or_log(operation)
            cc.ack_backup_queue.put(operation)
            ran += 1
        return ran

    def immediate_poll(self) -> None:
        """Immediate transfers after an op: poll, write what the acks queued, poll."""
        self.cache.check_hicache_events()
        self.pump()
        self.cache.check_hicache_events()
        self.prefetch.run(flush=False)  # ours runs a prefetch to its end within its op

    def flush(self) -> int:
        """A held ``flush``: write the stores queued so far, then poll, then move the
        prefetches on. Returns the write-throughs, loads, stores and prefetches it ended."""
        cache = self.cache
        transfers = len(cache.ongoing_write_through) + len(cache.ongoing_load_back)
        stores, prefetches = set(cache.ongoing_backup), set(cache.ongoing_prefetch)
        self.pump()
        cache.check_hicache_events()
        self.prefetch.flushed()
        self.prefetch.run()
        transfers -= len(cache.ongoing_write_through) + len(cache.ongoing_load_back)
        return transfers + len(stores - set(cache.ongoing_backup)) + len(prefetches - set(cache.ongoing_prefetch))

    # ---- state -----------------------------------------------------------------------
    def stored_keys(self) -> list[str]:
        """The page hashes in the store directory (``<hash>_<model>_<rank>_<size>.bin``)."""
        return sorted(name.split("_", 1)[0] for name in os.listdir(self.dir)
                      if name.endswith(".bin") and not name.startswith("."))

    def store_locks(self, full_type) -> dict[tuple, int]:
        """The Full host locks its stores in flight hold, per node by path: each
        ``ongoing_backup`` receipt's segment, from its node up to the receipt's
        boundary (a split moves the boundary up, as our store marks follow)."""
        core, out = self.cache.tree_core, {}
        for node_id, params in self.cache.ongoing_backup.values():
            node = core.node_by_id(node_id)
            boundary = params.get_lock_uuid(full_type, lock_host=True)
            while node is not core.root_node:
                key = node.key
                namespace = key.extra_key if key.cache_salt is None else (key.extra_key, key.cache_salt)
                ident = node_ident(namespace, node, core.root_node, their_tokens(core.root_node))
                out[ident] = out.get(ident, 0) + 1
                if node.component_data[full_type].metadata.get("host_uuid") == boundary:
                    break
                node = node.parent
        return out

    def difference(self, ours_cache, full_type) -> Optional[Difference]:
        """The first storage difference between our cache and SGLang's, or None."""
        storage = ours_cache.host.storage
        mine, theirs = storage.stored_keys(), self.stored_keys()
        if mine != theirs:
            extra = sorted(set(mine) ^ set(theirs))[0]
            side = "ours" if extra in mine else "SGLang"
            return Difference("storage.keys", len(mine), len(theirs), f"page {extra[:12]}… is stored only in {side}")
        if len(storage.in_flight) != len(self.cache.ongoing_backup):
            return Difference("storage.in_flight", len(storage.in_flight), len(self.cache.ongoing_backup))
        ours_locks, their_locks = _our_store_locks(ours_cache), self.store_locks(full_type)
        if ours_locks != their_locks:
            where = sorted(set(ours_locks.items()) ^ set(their_locks.items()), key=lambda i: (len(i[0][1]), i[0][1]))[0][0]
            return Difference("node.full.store_host_locks", ours_locks.get(where, 0), their_locks.get(where, 0),
                              f"the node ending at token {len(where[1])}")
        return self.prefetch.difference(ours_cache)


def _our_store_locks(cache) -> dict[tuple, int]:
    """Ours: the host locks each node holds for its stores in flight (its store marks)."""
    from cache.basics.keys import namespace_parts

    out, tree = {}, cache.tree
    for node in tree.nodes.values():
        marks = node.data[0].metadata.get("store", ())
        if marks and node is not tree.root:
            extra_key, salt, _ = namespace_parts(node.namespace)
            namespace = extra_key if salt is None else (extra_key, salt)
            ident = node_ident(namespace, node, tree.root, our_tokens(tree.root))
            out[ident] = out.get(ident, 0) + len(marks)
    return out
