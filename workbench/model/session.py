"""Executes scenario ops on a cache, keeping the names a scenario refers to.

Each op is the sequence of calls a scheduler would make (allocate, write KV, insert,
free the tail …), so a scenario reads like the scheduler code it reproduces.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

from cache import CacheError, EvictParams, InsertParams, MatchPrefixParams, RadixKey, UnifiedRadixCache
from cache.errors import InvalidValueError
from cache.host_config import host_components
from cache.params import IncLockRefResult, MatchResult
from cache.request import Req


class RunError(CacheError):
    """A name the scenario refers to does not exist at run time (only reachable from a
    step that expects an error: load-time checks catch the rest)."""


@dataclasses.dataclass
class MatchHandle:
    node: int
    prefix_len: int
    key: RadixKey  # packed bytes, not a list of ints: held handles add no work to the GC
    result: Optional[MatchResult]  # None for a named insert


@dataclasses.dataclass
class LockHandle:
    node: int
    receipt: IncLockRefResult


class Session:
    def __init__(self, cache: UnifiedRadixCache) -> None:
        self.cache = cache
        self.matches: dict[str, MatchHandle] = {}
        self.locks: dict[str, LockHandle] = {}
        self.released: dict[str, LockHandle] = {}  # kept so a second unlock reaches the cache
        self.reqs: dict[str, Req] = {}
        self.finished: dict[str, Req] = {}
        self.last_match: Optional[MatchHandle] = None
        self._ops: dict[str, Callable[[dict], Optional[dict]]] = {
            "insert": self.insert,
            "match": self.match,
            "lock": self.lock,
            "unlock": self.unlock,
            "release_window": self.release_window,
            "evict": self.evict,
            "req_prefill": self.req_prefill,
            "req_decode": self.req_decode,
            "req_chunk": self.req_chunk,
            "req_finish": self.req_finish,
            "check": lambda f: None,
            "load_back": self.load_back,
            "evict_host": self.evict_host,
            "flush": lambda f: {"completed": self.cache.check_hicache_events()},
        }

    def run(self, op: str, fields: dict[str, Any]) -> Optional[dict[str, Any]]:
        self.last_match = None
        return self._ops[op](fields)

    # ---- tree ops -------------------------------------------------------------------
    def insert(self, f: dict) -> dict:
        """Allocate slots for the whole key, write its KV, free the SWA below
        ``swa_evicted_seqlen``, take a Mamba state, insert, then free the unaligned
        tail (and the state, when the tree already had one).

        All the allocations are checked together first, so a refusal changes nothing:
        no slot taken, nothing evicted. Should a call before the insert fail anyway
        (after the check only a fault can), what was taken goes back before the error
        does; eviction an allocation already did cannot be undone, which is why the
        check comes ahead of every allocation. After the insert (the commit) only
        returns of what the tree did not take are left."""
        cache = self.cache
        tokens = f["key"]
        key = RadixKey(tokens, f.get("extra_key"))
        aligned = len(tokens) - len(tokens) % cache.page_size
        window_floor = f.get("swa_evicted_seqlen", 0)
        if window_floor:  # a request whose window slid: its SWA KV below the floor is gone
            if "swa" not in cache.by_name:
                raise CacheError("swa_evicted_seqlen needs the swa component")
            if type(window_floor) is not int or window_floor < 0 or window_floor % cache.page_size:
                # freeing part of a page's SWA would free the whole page under the rest
                raise InvalidValueError(
                    f"swa_evicted_seqlen must be a non-negative multiple of page_size {cache.page_size}"
                    f" (got {window_floor!r})"
                )
        mamba = "mamba" in cache.by_name
        cache.check_capacity(len(tokens), mamba_states=1 if mamba else 0)
        slots = cache.alloc_kv(len(tokens))
        state = None
        try:
            cache.write_kv(slots, tokens)
            if window_floor:
                cache.free_swa(slots[:window_floor])
            if mamba:
                state = cache.alloc_mamba_state(tokens[:aligned])
            result = cache.insert(InsertParams(key, slots, state, swa_evicted_seqlen=window_floor))
        except BaseException:  # refused: the tree took nothing, so everything goes back
            cache.free_kv([slots])
            if state is not None:
                cache.free_mamba_state(state)
            raise
        if aligned < len(tokens):
            cache.free_kv([slots[aligned:]])
        if state is not None and result.mamba_exist:
            cache.free_mamba_state(state)  # the tree kept its own state
        if "as" in f:  # a name for the node the insert ended on, for a later lock
            self.matches[f["as"]] = MatchHandle(result.last_device_node, result.prefix_len, key, None)
        return {"prefix_len": result.prefix_len}

    def match(self, f: dict) -> dict:
        key = RadixKey(f["key"], f.get("extra_key"))
        result = self.cache.match_prefix(MatchPrefixParams(key))
        handle = MatchHandle(result.last_device_node, result.prefix_len, key, result)
        self.last_match = handle
        if "as" in f:
            self.matches[f["as"]] = handle
        out = {"prefix_len": result.prefix_len, "host_hit_length": result.host_hit_length}
        if "swa" in self.cache.by_name:
            out["swa_host_hit_length"] = result.swa_host_hit_length
        if "mamba" in self.cache.by_name:
            out["mamba_branching_seqlen"] = result.mamba_branching_seqlen
            out["mamba_host_hit_length"] = result.mamba_host_hit_length
        return out

    def evict_host(self, f: dict) -> dict:
        out = {"full_host_evicted": self.cache.evict_host(f.get("full", 0))}
        for component in host_components(self.cache.config.components)[1:]:
            if component in f:
                out[f"{component}_host_evicted"] = self.cache.evict_host(f[component], component)
        return out

    def load_back(self, f: dict) -> dict:
        result = self.cache.load_back(RadixKey(f["key"], f.get("extra_key")), f.get("mem_quota"))
        return {"loaded": result.loaded, "host_hit_length": result.host_hit_length}

    def lock(self, f: dict) -> None:
        match = self.matches.get(f["match"])
        if match is None:
            raise RunError(f"unknown match name {f['match']!r}")
        receipt = self.cache.inc_lock_ref(match.node)
        self.locks[f["as"]] = LockHandle(match.node, receipt)
        self.released.pop(f["as"], None)

    def _lock_handle(self, name: str) -> LockHandle:
        handle = self.locks.get(name) or self.released.get(name)
        if handle is None:
            raise RunError(f"unknown lock name {name!r}")
        return handle

    def unlock(self, f: dict) -> None:
        handle = self._lock_handle(f["lock"])
        self.cache.dec_lock_ref(handle.node, handle.receipt)
        self.released[f["lock"]] = self.locks.pop(f["lock"])

    def release_window(self, f: dict) -> None:
        handle = self._lock_handle(f["lock"])
        release = getattr(self.cache, "release_window", None)
        if release is None:
            raise RunError("release_window needs the swa component")
        release(handle.node, handle.receipt)

    def evict(self, f: dict) -> dict:
        result = self.cache.evict(EvictParams.of(f))
        return {
            "full_evicted": result.num_tokens_evicted,
            "swa_evicted": result.swa_num_tokens_evicted,
            "mamba_evicted": result.mamba_num_evicted,
            **{f"{c}_evicted": n for c, n in result.by_component.items() if c not in ("full", "swa", "mamba")},
        }

    # ---- request ops ---------------------------------------------------------------
    def _req(self, name: str) -> Req:
        req = self.reqs.get(name) or self.finished.get(name)
        if req is None:
            raise RunError(f"unknown request {name!r}")
        return req

    def req_prefill(self, f: dict) -> dict:
        name = f["req"]
        if name in self.reqs:
            raise RunError(f"request {name!r} is already running")
        req = self.cache.new_request(f["tokens"], rid=name)
        self.reqs[name] = req
        self.finished.pop(name, None)
        return {"prefix_len": req.cache_protected_len}

    def req_decode(self, f: dict) -> None:
        req = self._req(f["req"])
        # one call: a refused decode must not leave half a step (tokens in, no slide)
        self.cache.extend_request(req, f["tokens"], slide=bool(f.get("slide_window")))

    def req_chunk(self, f: dict) -> None:
        self.cache.cache_unfinished_req(self._req(f["req"]))

    def req_finish(self, f: dict) -> None:
        name = f["req"]
        req = self._req(name)
        self.cache.cache_finished_req(req, is_insert=f.get("insert", True))
        self.finished[name] = self.reqs.pop(name)

    # ---- state read-back -------------------------------------------------------------
    def node_of(self, match_name: str) -> Optional[int]:
        handle = self.matches.get(match_name)
        return None if handle is None else handle.node
