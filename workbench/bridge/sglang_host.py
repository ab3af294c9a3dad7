"""SGLang 0.5.23's host tier (HiCache) on the bridge's SGLang side, without a GPU.

``SGLangSide`` builds the device cache; for a scenario with ``[config] hicache`` it asks
this module for the ServerArgs fields and then for a ``HostTier``, which calls SGLang's
own ``init_hicache`` (its HybridCacheController, host pools and write policy decide
everything) and runs the host ops: ``load_back``, ``evict_host`` and ``flush``.

Two things SGLang's host tier needs a GPU for, and what stands in for them here:
 * pinning: each host pool registers its buffer with ``cudaHostRegister``, which has no
   driver to talk to. It is a no-op while the pools are built (and only then).
 * the byte copies: each host pool's ``backup_from_device_all_layer`` and
   ``load_to_device_per_layer`` launch copy kernels. The bridge compares bookkeeping
   (tree, locks, host copies, pools), never KV bytes, so on the pools of this one
   cache they copy nothing. Which slots a copy would use, and when it is acknowledged,
   stay SGLang's: its controller allocates, queues and acks as on a GPU (on the CPU
   its stream events are always complete, so every queued copy is done at the next
   ``check_hicache_events``).

Our ``transfers = "immediate"`` completes each copy within its op: here SGLang's
events are polled after every op, as its scheduler polls them every step. ``held``
keeps copies in flight until a ``flush``, SGLang's ``check_hicache_events``.
"""

from __future__ import annotations

import atexit
import contextlib
from typing import Any, Optional

from cache.tiers.hicache_config import HiCacheConfig

from .sglang_env import BridgeError
from . import sglang_storage
from .sglang_storage import StorageSide
from ..model.ops.spec import BASE

MEM_LAYOUT = "page_first"  # SGLang's Mamba host pool takes only page-first layouts
IO_BACKEND = "kernel"
FULL_POOL_NAMES = ("kv", "full")  # what SGLang may name the Full KV host pool's entry
SLACK = 1e-9  # keeps int(size * ratio) from rounding one below an exact ratio


def resolved(config: dict) -> HiCacheConfig:
    """Our host tier's config, with the sizes ours derives when they are left out."""
    from cache.config.cache_config import CacheConfig

    fields = {k: v for k, v in config.items() if k not in ("faults", "device")}
    return CacheConfig.of(**{**fields, "components": tuple(config["components"])}).hicache


def server_args_fields(config: dict) -> dict:
    """ServerArgs fields for a scenario's host tier ({} without one). SGLang sizes every
    host pool from one ``hicache_ratio`` (a share of each device pool plus a page or a
    slot); ours takes sizes, so the ratio is the one that gives our Full host size and
    ``HostTier`` checks that the others come out equal."""
    if not config.get("hicache"):
        return {}
    host = resolved(config)
    page = config.get("page_size", 1)
    ratio = (host.host_kv_size - page) / config["kv_size"] + SLACK
    return dict(hicache_ratio=ratio, hicache_write_policy=host.write_policy, hicache_io_backend=IO_BACKEND,
                hicache_mem_layout=MEM_LAYOUT, **sglang_storage.server_args_fields(config))


@contextlib.contextmanager
def _no_host_pinning():
    """cudaHostRegister as a no-op while the host pools are built."""
    from sglang.srt.mem_cache.pool_host import common

    original = common._cuda_host_register
    common._cuda_host_register = lambda buffer, registration_granularity_bytes=None: None
    try:
        yield
    finally:
        common._cuda_host_register = original


def _copy_nothing(*args, **kwargs) -> None:
    """A host pool's byte copy: the bridge compares no KV bytes (module docstring)."""
    return None


class HostTier:
    """SGLang's host tier attached to one ``SGLangSide``'s cache."""

    def __init__(self, side, server_args, params, config: dict) -> None:
        self.side = side
        self.cache = side.cache
        self.config = resolved(config)
        self.immediate = self.config.transfers == "immediate"
        self.storage = StorageSide.for_config(config)  # its storage tier (sglang_storage.py), or None
        try:
            self._build(server_args, params, config)
        except BaseException:  # no side to close: its store directory goes now
            self.close()
            raise

    def _build(self, server_args, params, config: dict) -> None:
        cache = self.cache
        with _no_host_pinning(), self.storage.building() if self.storage else contextlib.nullcontext():
            cache.init_hicache(server_args, params)
        atexit.unregister(cache.shutdown)  # its controller threads end with the process
        if cache.cache_controller is None:
            raise BridgeError("SGLang built no host tier for this config")
        cache.load_back_threshold = self.config.load_back_threshold
        self.pools = {entry.name.value: entry.host_pool for entry in cache.host_pool_group.entries}
        for pool in self.pools.values():
            pool.backup_from_device_all_layer = _copy_nothing
            pool.load_to_device_per_layer = _copy_nothing
        if self.storage is not None:
            self.storage.attach(cache, self.pools)
        self._check_sizes(config)

    def close(self) -> None:
        if self.storage is not None:
            self.storage.close()

    def _check_sizes(self, config: dict) -> None:
        ours = {BASE: self.config.host_kv_size, **self.config.host_sizes}
        for name in config["components"]:
            pool = self.pools.get(self._pool_name(name))
            theirs = None if pool is None else int(pool.size)
            if theirs != ours[name]:
                raise BridgeError(f"SGLang sizes every host pool from one hicache_ratio: with this config its {name}"
                                  f" host pool holds {theirs}, ours {ours[name]}")

    def _pool_name(self, component: str) -> str:
        kind = self.side.types[component]
        matches = [name for name in self.pools if name.lower() == kind.name.lower()]
        if matches:
            return matches[0]
        # SGLang names pool entries by pool kind: the Full KV pool may be "kv"
        return next((name for name in self.pools if component == BASE and name.lower() in FULL_POOL_NAMES), component)

    # ---- ops -------------------------------------------------------------------------
    def after_op(self) -> None:
        """Immediate transfers: acknowledge what the op queued (SGLang's per-step poll)."""
        if self.immediate and self.storage is not None:
            self.storage.immediate_poll()
        elif self.immediate:
            self.cache.check_hicache_events()

    def op_flush(self, f: dict) -> dict:
        """SGLang's poll; ``completed``: the write-throughs and loads it acknowledged
        (its own call returns nothing: counted from its in-flight tables), and with
        storage the stores (sglang_storage.py)."""
        if self.storage is not None:
            return {"completed": self.storage.flush()}
        before = self._in_flight()
        self.cache.check_hicache_events()
        return {"completed": before - self._in_flight()}

    def _in_flight(self) -> int:
        return len(self.cache.ongoing_write_through) + len(self.cache.ongoing_load_back)

    def op_evict_host(self, f: dict) -> dict:
        sg = self.side.sg
        out = {f"{BASE}_host_evicted": int(self.cache.evict_host(f.get(BASE, 0), sg.ComponentType.FULL))}
        for name, amount in f.items():  # in the step's order, as ours (ops/host.py)
            if name != BASE:
                out[f"{name}_host_evicted"] = int(self.cache.evict_host(amount, self.side.types[name]))
        return out

    def op_load_back(self, f: dict) -> dict:
        """What the scheduler does for a request whose prefix is partly on the host,
        admitted and then dropped: match with the request, ``init_load_back`` (SGLang
        evicts for the slots, gives a request loading a host-only Mamba state its own
        state slot, and locks what it loads), start the load; then give back what the
        request was given. No request row: admission loads back before the row is
        allocated (a row would take a Mamba slot without evicting for it)."""
        from array import array

        from sglang.srt.mem_cache.base_prefix_cache import InitLoadBackParams

        side, sg, cache = self.side, self.side.sg, self.cache
        req = sg.Req(rid=side.next_rid(), origin_input_text="", origin_input_ids=array("q", f["key"]),
                     sampling_params=sg.SamplingParams(temperature=0, max_new_tokens=1))
        try:
            m = cache.match_prefix(sg.MatchPrefixParams(key=side.key(f["key"], f.get("extra_key"), f.get("cache_salt")), req=req))
            req.prefix_len, req.last_node = m.device_prefix_len, m.last_device_node
            req.last_host_node, req.best_match_node = m.last_host_node, m.best_match_node
            req.host_hit_length = m.host_hit_length
            req.swa_host_hit_length, req.mamba_host_hit_length = m.swa_host_hit_length, m.mamba_host_hit_length
            loaded, _ = cache.init_load_back(InitLoadBackParams(
                best_match_node=m.best_match_node, host_hit_length=m.host_hit_length, mem_quota=f.get("mem_quota"),
                req=req))
            cache.ready_to_load_host_cache()
        finally:
            side.abandon(req)  # the state slot prepare_load_back gave it, if any
        return {"loaded": int(loaded), "host_hit_length": int(m.host_hit_length)}

    def admit_load_back(self, req, f: dict) -> int:
        """PrefillAdder's load-back for a request just matched (schedule_policy.py):
        ``init_load_back`` with the request, whose prepared Mamba slot it keeps; the
        prefix then ends on the node returned, loaded tokens protected."""
        from sglang.srt.mem_cache.base_prefix_cache import InitLoadBackParams

        cache = self.cache
        if not req.needs_host_load_back():
            return 0
        loaded, node = cache.init_load_back(InitLoadBackParams(
            best_match_node=req.best_match_node, host_hit_length=req.host_hit_length, mem_quota=f.get("mem_quota"),
            req=req))
        cache.ready_to_load_host_cache()
        req.host_loaded_length, req.last_node = loaded, node
        req.prefix_len += loaded
        req.kv.cache_protected_len = req.prefix_len
        return int(loaded)

    # ---- state -----------------------------------------------------------------------
    def node_host_lens(self, node) -> dict[str, Optional[int]]:
        """Per component, the length of the node's host copy (None: none)."""
        out = {}
        for name, kind in self.side.types.items():
            host = node.component_data[kind].host_value
            out[name] = None if host is None else int(len(host))
        return out

    def host_pools(self) -> dict[str, tuple[int, int]]:
        """Per component: its host pool's (available, total)."""
        out: dict[str, tuple[int, int]] = {}
        for name in self.side.names:
            pool: Any = self.pools.get(self._pool_name(name))
            if pool is not None:
                out[name] = (int(pool.available_size()), int(pool.size))
        return out
