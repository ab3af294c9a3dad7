"""Mamba / SSM state: one recurrent state per node boundary.

A state is valid only at the exact token boundary where it was taken, so a match may
end only on a node that holds one, a request gets its own copy of it (copy-on-write),
a split leaves it on the deeper node, and it is evicted first (priority 0): internal
nodes lose it (tombstone), leaves are deleted whole, Full KV included.

Without the extra buffer (page 1) the request's running state is what gets cached.
With it (page > 1) the model tracks states at checkpoint positions into two
ping-pong slots; the newest tracked one is what the tree keeps.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Optional

import torch

from ...basics.errors import InvalidValueError, StateSlotsAssertError
from ...observe.events import Cause, EventKind
from ...observe.views import PoolView
from ...tree.match_verdicts import node_ids_text
from ...basics.params import EvictParams, with_match_field
from ...pools.kv_buffer import prefix_hashes
from ...pools.mamba_pool import MambaStatePool
from ..anchor_lock import AnchorLockMixin
from ..base import LRUEvictionMixin, TreeComponent
from ..own_pool import OwnPoolMixin
from . import fields
from .cap import EvictExcessPathStates, evict_excess_path_states
from .host import MambaHostMixin

if TYPE_CHECKING:
    from ...observe.eviction_batch import EvictionBatch
    from ...basics.params import InsertParams, MatchResult
    from ...basics.request import Req
    from ...tree.node import TreeNode

CLEARED = -1  # the fingerprint of an empty state slot (no tokens run yet)
CHUNK_SIZE = 64  # the model's SSM chunk: checkpoints sit on lcm(chunk, page) boundaries


class MambaComponent(MambaHostMixin, AnchorLockMixin, OwnPoolMixin, LRUEvictionMixin, TreeComponent):
    name = "mamba"
    uses_lru = True
    branching_field = "mamba_branching_seqlen"  # on the state grid (chunk and page)
    leaf_priority = 0
    internal_priority = 0
    sets_checkpoints = True  # a request is cached up to its last tracked state
    prompt_split_ok = False  # a split leaves the upper part without a state
    refuses_retraction_backup = True  # SGLang 0.5.23 (supports_retraction_backup): a state is not backed up
    config_fields = fields.FIELDS  # the model options (fields.py)

    def __init__(self, cache, index: int) -> None:
        super().__init__(cache, index)
        cfg = cache.config
        self.page_size = cfg.page_size
        self.extra_buffer = self.config_value("mamba_extra_buffer")  # ping-pong tracking; without, the running state
        self.max_states_per_path = self.config_value("mamba_max_states_per_path")
        # a checkpoint's re-lock leaves the new node's state unlocked (it was copied to the request)
        self.skips_decode_lock = self.config_value("mamba_skip_decode_lock")
        chunk = max(CHUNK_SIZE, cfg.page_size)
        self.grid = chunk * cfg.page_size // math.gcd(chunk, cfg.page_size)
        self.pool = MambaStatePool(cfg.mamba_size, cache.device, self.name)

    def check_config_value(self, field: str, value):
        if field in fields.FIELDS:  # the rules CacheConfig checks a given value by
            return fields.check(field, value, self.cache.config.page_size)
        return super().check_config_value(field, value)

    def value_len(self, node: TreeNode) -> int:
        return 1

    def node_extras(self, node: TreeNode) -> dict:
        value = node.data[self.index].value
        if value is None:
            return {}
        return {"slot": value.item() if value.numel() == 1 else int(value[0])}  # item(): a third of indexing

    # ---- match ------------------------------------------------------------
    @property
    def branching_grid(self) -> int:
        return self.grid

    def create_match_validator(self):
        i = self.index
        # a node matched only in part is split first and its upper part has no state
        return lambda node, length: length == node.length and node.data[i].value is not None

    def match_verdict(self, path):
        """A match may end only on a node holding a state: the deepest one on the path."""
        i = self.index
        held = [k for k, node in enumerate(path) if node.data[i].value is not None]
        best = held[-1] if held else -1
        if best == len(path) - 1:
            return best, "Mamba state at the walk's end"
        rest = path[best + 1 :]
        nodes, hold = ("node", "holds") if len(rest) == 1 else ("nodes", "hold")
        if best < 0:
            return best, f"no Mamba state on the path; {nodes} {node_ids_text(rest)} {hold} none"
        tokens = sum(node.length for node in path[: best + 1])
        return best, (f"nearest Mamba state at node #{path[best].id} ({tokens} tokens); "
                      f"{nodes} {node_ids_text(rest)} below it {hold} none")

    def pinned_by_lock(self, path) -> int:
        if not path:
            return 0
        cd = path[-1][0].data[self.index]
        return 1 if cd.lock_ref == 0 and cd.value is not None else 0

    def finalize_host_match(self, result: MatchResult, best: TreeNode) -> MatchResult:
        cd = best.data[self.index]
        if cd.value is None and cd.host_value is not None:
            result = with_match_field(result, "mamba_host_hit_length", 1)  # the state is on the host: load it back
        return result

    def finalize_match_in_cache(self, params, result: MatchResult) -> MatchResult:
        """Copy-on-write: the request gets its own slot holding the matched state."""
        if not params.cow_mamba:
            return result
        src = self.tree.nodes[result.best_match_node].data[self.index].value
        if src is None:
            return result
        req = params.req
        if req.mamba_pool_idx is None:
            receipt = self.tree.inc_lock_ref(result.best_match_node)  # the source must survive eviction
            try:
                req.mamba_pool_idx = self.alloc_slot()
            finally:
                self.tree.dec_lock_ref(result.best_match_node, receipt)
        self.pool.copy(src, req.mamba_pool_idx)
        req.mamba_cow_src = src
        self._emit(EventKind.COW, self.tree.nodes[result.best_match_node], Cause.REQUEST, 1, f"slot {int(src[0])} -> {int(req.mamba_pool_idx[0])}")
        return result

    on_walkdown = TreeComponent.on_walkdown  # new states enter the LRU at commit; walking refreshes nothing

    def on_match_end(self, node: TreeNode) -> None:
        if node.data[self.index].value is not None:
            self.tree.lru[self.name].promote(node)  # only the state a match uses

    # ---- insert -----------------------------------------------------------
    def check_insert_params(self, params: InsertParams) -> None:
        self.check_insert_value(params.mamba_value)

    def check_insert_value(self, value: Optional[torch.Tensor]) -> None:
        """Called before the walk: a bad mamba_value must not leave a half insert."""
        if value is None:
            raise InvalidValueError("insert needs a mamba_value (one state slot) when mamba is a component")
        if not isinstance(value, torch.Tensor) or value.dtype is not torch.int64 or value.shape != (1,):
            raise InvalidValueError("mamba_value must be a 1-element int64 tensor (a state slot)")

    def commit_insert(self, node, is_new_leaf, params, result, actions) -> None:
        cd = node.data[self.index]
        if node is self.tree.root:
            result.mamba_exist = True
            return
        if cd.value is None:
            self.tree.set_component_value(node.id, self.name, params.mamba_value)
            node.last_access_time = self.tree.tick()
            if self.max_states_per_path != fields.NO_CAP:  # deferred: it runs after the insert's other actions
                actions.append(EvictExcessPathStates(node.id, self.max_states_per_path))
            return
        self.tree.lru[self.name].promote(node)
        node.last_access_time = self.tree.tick()
        result.mamba_exist = True  # the tree keeps its own state; the caller frees the incoming one

    def apply_action(self, action) -> None:
        if isinstance(action, EvictExcessPathStates):
            evict_excess_path_states(self, action.node, action.cap)
        else:
            super().apply_action(action)

    # ---- split ------------------------------------------------------------
    def redistribute_on_split(self, new_parent: TreeNode, child: TreeNode) -> None:
        upper = new_parent.data[self.index]
        upper.value, upper.lock_ref = None, 0  # the state belongs to the deeper boundary
        upper.session_ref = 0  # and so does a session's ref on it

    # ---- eviction ---------------------------------------------------------
    def evict_component(self, node: TreeNode, batch: EvictionBatch) -> int:
        cd = node.data[self.index]
        if cd.value is None:
            return 0
        batch.free("mamba", cd.value, 1)
        self.tree.evictable[self.index] -= 1
        return 1

    # locks: AnchorLockMixin (this node only, never the root)

    # ---- requests ---------------------------------------------------------
    def slots_for_request(self) -> int:
        return 3 if self.extra_buffer else 1  # running state (+ two ping-pong track slots)

    def alloc_slot(self) -> torch.Tensor:
        """One state slot, evicting Mamba data when the pool is full."""
        if self.pool.available_size() < 1:
            self.cache.evict_for_alloc(EvictParams(mamba_num=1))
        if self.pool.available_size() < 1:
            raise StateSlotsAssertError(  # SGLang 0.5.23 asserts "Can not alloc mamba cache"
                f"SGLang asserts here: cannot alloc mamba cache: all {self.pool.size} state slots are locked or held by running requests"
            )
        return self.pool.alloc(1)

    def reserve_request(self, req: Req) -> None:
        """The request's running state slot (the match copies into it) and, with the
        extra buffer, its two ping-pong slots; a failed second one returns the first."""
        if req.mamba_pool_idx is None:
            req.mamba_pool_idx = self.alloc_slot()
            self.pool.write(req.mamba_pool_idx, CLEARED)  # v0.5.23's mamba_needs_clear: a fresh slot starts empty
        if self.extra_buffer and req.mamba_ping_pong is None:
            first = self.alloc_slot()
            try:
                second = self.alloc_slot()
            except BaseException:
                self.pool.free(first)
                raise
            req.mamba_ping_pong = torch.cat([first, second])

    def admit_request(self, req: Req, prefix_len: int) -> None:
        """A new request: its running state (copied on match, or fresh) has now seen
        every token of its prompt. With no prefix the prefill starts from an empty
        state whatever the slot holds (v0.5.23's Mamba forward reads the slot only
        where the extend's prefix length is above 0: has_initial_states)."""
        self.reserve_request(req)
        self.advance_request(req, 0, admitting=prefix_len > 0)

    def advance_request(self, req: Req, start: int, admitting: bool = False) -> None:
        """The model ran tokens [start, kv_len): update the running state and track
        checkpoint states at grid boundaries (extra buffer). ``admitting``: the
        prefill starts from whatever the running slot holds, which must be empty or
        a state of this prompt's prefix (a copy-on-write or a load's copy); any other
        content is a stale state, and the state computed from it is wrong too."""
        tokens = req.fill_ids[: req.kv_len]
        if not tokens:
            return
        fps = prefix_hashes(tokens)  # on the host: the pool takes one int
        state = int(fps[-1])
        if admitting:
            start_state = self.pool.fingerprint_of(req.mamba_pool_idx)
            if start_state != CLEARED and not bool((fps == start_state).any()):
                state = -(state + 2)  # a state no prefix has: the checks name it (mamba.request_state)
        self.pool.write(req.mamba_pool_idx, state)
        if not self.extra_buffer:
            return
        tracked = len(tokens) - len(tokens) % self.grid
        if tracked and tracked > (req.mamba_last_track_seqlen or 0):
            slot = req.mamba_ping_pong[req.mamba_next_track_idx : req.mamba_next_track_idx + 1]
            self.pool.write(slot, int(fps[tracked - 1]))
            req.mamba_prev_track_seqlen = req.mamba_last_track_seqlen
            req.mamba_last_track_seqlen = tracked
            req.mamba_next_track_idx ^= 1

    def _keep_idx(self, req: Req) -> int:
        return req.mamba_next_track_idx ^ 1  # the newest tracked slot

    def checkpoint_seqlen(self, req: Req) -> Optional[int]:
        return req.mamba_last_track_seqlen

    def caching_len(self, req: Req, length: int, finished: bool) -> Optional[int]:
        return self._caching_plan(req, length, finished)[0] or 0

    def _caching_plan(self, req: Req, length: int, finished: bool) -> tuple[Optional[int], Optional[int]]:
        """(how many tokens a checkpoint may cache: as far as a state was taken, None
        when no state was; the ping-pong slot holding that state); read-only, so a
        checkpoint can be refused before any slot moves. A finished request falls back
        to its older tracked state when the newer one lies past what it caches."""
        if not self.extra_buffer:
            return length, None
        cache_len, keep = req.mamba_last_track_seqlen, self._keep_idx(req)
        if not finished:
            return cache_len, keep
        cache_len = cache_len or 0
        if cache_len > length:
            keep, cache_len = keep ^ 1, req.mamba_prev_track_seqlen
            if cache_len is None or cache_len > length:
                return 0, None
        return cache_len, keep

    def prepare_for_caching_req(self, req: Req, params: InsertParams, length: int, finished: bool) -> Optional[int]:
        cache_len, keep = self._caching_plan(req, length, finished)
        if finished:
            if not self.extra_buffer:
                params.mamba_value = req.mamba_pool_idx.clone()
            elif keep is not None:
                req.mamba_keep_idx = keep
                params.mamba_value = req.mamba_ping_pong[keep : keep + 1].clone()
            return cache_len
        if cache_len is None:
            return 0
        if self.extra_buffer:  # donate the tracked slot, put a fresh one in its place
            donated = req.mamba_ping_pong[keep : keep + 1].clone()
            req.mamba_ping_pong[keep] = self.alloc_slot()[0]
        else:  # fork the running state
            donated = self.alloc_slot()
            self.pool.copy(req.mamba_pool_idx, donated)
        params.mamba_value = donated
        return cache_len

    def cleanup_after_caching_req(self, req: Req, finished: bool, result, params=None) -> None:
        if finished:
            inserted = result is not None and not result.mamba_exist
            keep = getattr(req, "mamba_keep_idx", None) if inserted else None
            self.release_request(req, keep_ping_pong=keep, keep_running=inserted and not self.extra_buffer)
            return
        value = None if params is None else params.mamba_value
        if value is not None and (result is None or result.mamba_exist):
            self.pool.free(value)  # the tree already had that state: our fork is not needed
        req.mamba_last_track_seqlen = req.mamba_prev_track_seqlen = None

    def release_request(self, req: Req, keep_ping_pong: Optional[int] = None, keep_running: bool = False) -> None:
        """Free the request's state slots, except the one the tree now owns."""
        slots = []
        if req.mamba_pool_idx is not None and not keep_running:
            slots.append(req.mamba_pool_idx)
        if req.mamba_ping_pong is not None:
            slots.extend(req.mamba_ping_pong[i : i + 1] for i in range(2) if i != keep_ping_pong)
        if slots:
            self.pool.free(torch.cat(slots))
        req.mamba_pool_idx = req.mamba_ping_pong = None

    def request_extras(self, req: Req) -> dict:
        """The running state slot, the ping-pong track slots (extra buffer) and where
        the newest tracked state was taken (the checkpoint cursor)."""
        running = req.mamba_pool_idx
        ping_pong = req.mamba_ping_pong
        return {
            "running_slot": None if running is None else running.item(),
            "ping_pong": () if ping_pong is None else tuple(ping_pong.tolist()),
            "last_track_seqlen": req.mamba_last_track_seqlen,
        }

    def held_slots(self, req: Req) -> list[int]:
        slots = [] if req.mamba_pool_idx is None else req.mamba_pool_idx.tolist()
        if req.mamba_ping_pong is not None:
            slots += req.mamba_ping_pong.tolist()
        return slots

    # ---- pools ------------------------------------------------------------
    def pool_views(self) -> dict:
        held = sum(len(self.held_slots(r)) for r in self.cache.kv_holders())
        i = self.index
        return {"mamba": PoolView("mamba", self.pool.size, self.pool.available_size(), self.tree.evictable[i], self.tree.protected[i], held)}

    def free_device_values(self, values: list[torch.Tensor], cause: Cause, node: Optional[int]) -> None:
        freed = self.pool.free(values[0] if len(values) == 1 else torch.cat(values))
        if freed:
            self._emit(EventKind.FREE, None, cause, freed, "pool=mamba")
