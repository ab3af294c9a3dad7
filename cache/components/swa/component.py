"""Sliding-window attention KV: only the last ``sliding_window`` tokens stay alive.

So the tree holds nodes whose SWA data is a tombstone while their Full KV lives on. A
node is a valid match boundary only if the run of SWA-bearing nodes above it, back to
the last tombstone, covers a whole window (or has no gap since the root). A lock pins
just one window: it walks up until ``sliding_window`` tokens are covered and stamps a
boundary uuid on the node where it stopped, so the release stops exactly there even
after a later split moved that edge. Eviction tombstones internal nodes (Full stays)
and deletes leaves whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import numpy as np
import torch

from ...observe.actions import ComponentAction, FreeDeviceKVFullOnly
from ...observe.events import Cause, EventKind
from ...observe.views import PoolView
from ...basics.keys import ceil_align
from ...basics.numpy_views import distinct, gather
from ...basics.request import own_slots
from ...pools.swa_pool import SWAPool
from ..base import LRUEvictionMixin, TreeComponent
from .actions import RebuildSWA, RecoverLockedSWA
from ..own_pool import OwnPoolMixin
from . import fields
from .host import SWAHostMixin

if TYPE_CHECKING:
    from ...observe.eviction_batch import EvictionBatch
    from ...basics.params import DecLockRefParams, IncLockRefResult, InsertParams, MatchResult
    from ...tree.node import TreeNode

_NO_GAP_YET = float("inf")  # a match's run of live SWA before any tombstone: every window is covered


class SWAComponent(SWAHostMixin, OwnPoolMixin, LRUEvictionMixin, TreeComponent):
    name = "swa"
    uses_lru = True
    branching_field = "swa_branching_seqlen"  # on the page grid
    kv_peer = True
    leaf_priority = 0
    internal_priority = 1
    has_window_lock = True
    prompt_split_ok = False  # a leaf is capped to one live window; a split would cut it
    keeps_retraction_window = True  # a retraction backup keeps the window, not the row
    session_coverage = "window"  # a session holds its last window plus a page (session_refs.py)
    config_fields = fields.FIELDS  # the model options (fields.py)

    def __init__(self, cache, index: int) -> None:
        super().__init__(cache, index)
        cfg = cache.config
        # v0.5.23's swa_retain_window: matching, locks, leaf caps and frees all keep this much
        self.window = max(cfg.sliding_window, self.config_value("swa_draft_window"))
        self.gates_prefix_match = self.config_value("swa_gates_prefix_match")
        self.frees_out_of_window = self.config_value("swa_free_out_of_window")
        self.page_size = cfg.page_size
        # a fresh leaf is capped to this many tokens of live SWA (one page-aligned window)
        self.window_tail = ceil_align(self.window, self.page_size)
        self.pool = SWAPool(cfg.swa_pool_size, cfg.kv_size, cfg.page_size, cache.device, self.name)
        self._checked: Optional[tuple] = None  # (receipt, its segment) the release check just walked

    def check_config_value(self, field: str, value):
        if field in fields.FIELDS:  # the rules CacheConfig checks a given value by
            return fields.check(field, value, self.cache.config.page_size)
        return super().check_config_value(field, value)

    def ungated_tombstone(self, node: TreeNode) -> bool:
        """With swa_gates_prefix_match off, a SWA tombstone still ends a match where the
        node's Full KV is on the device or backed up (the tree does not own the SWA state)."""
        full = node.data[0]
        return not self.gates_prefix_match and (full.value is not None or full.host_value is not None)

    # ---- inspection -------------------------------------------------------
    def node_extras(self, node: TreeNode) -> dict:
        uuid = node.data[self.index].metadata.get("uuid")
        return {"boundary": uuid} if uuid is not None else {}

    # ---- match ------------------------------------------------------------
    @property
    def branching_grid(self) -> int:
        return self.page_size

    def create_match_validator(self):
        i, window = self.index, self.window
        run = _NO_GAP_YET  # tokens of live SWA since the last gap

        def validate(node: TreeNode, length: int) -> bool:
            nonlocal run
            if node.data[i].value is None:
                run = 0
                return self.ungated_tombstone(node)
            run += length
            return run >= window

        return validate

    def match_verdict(self, path):
        """The validator's rule, replayed to say why: a node is accepted while its run of
        live SWA since the last tombstone covers a window (or no tombstone came yet)."""
        i, window = self.index, self.window
        run, best, gap, first_gap = None, -1, None, None  # run None: no tombstone yet
        for k, node in enumerate(path):
            if node.data[i].value is None:
                run, gap = 0, node
                if self.ungated_tombstone(node):
                    best, first_gap = k, None
                    continue
                first_gap = first_gap or node  # the first tombstone below the best so far
                continue
            run = None if run is None else run + node.length
            if run is None or run >= window:
                best, first_gap = k, None
        if best == len(path) - 1:
            if gap is None:
                return best, "no tombstone on the path"
            if path[-1] is gap:
                return best, f"tombstone at node #{gap.id} accepted: swa_gates_prefix_match is off and its Full KV is live"
            return best, f"window run of {run} tokens since tombstone #{gap.id} >= sliding_window {window}"
        if path[-1] is gap:
            why = f"tombstone at node #{gap.id}"
        else:
            why = f"window run of {run} tokens since tombstone #{gap.id} < sliding_window {window}"
        if first_gap is None or first_gap is gap:  # None: the last tombstone was accepted (ungated)
            return best, why
        return best, f"{why}; first tombstone below the match end: #{first_gap.id}"

    def pinned_by_lock(self, path) -> int:
        i, covered, pinned = self.index, 0, 0
        for node, n in reversed(path):
            if covered >= self.window:
                break
            cd = node.data[i]
            if cd.lock_ref == 0 and cd.value is not None:
                pinned += n
            covered += n
        return pinned

    on_walkdown = TreeComponent.on_walkdown  # walking through old ancestors must not keep them hot

    def on_match_end(self, node: TreeNode) -> None:
        self._refresh_window(node)

    def on_insert_end(self, node: TreeNode) -> None:
        self._refresh_window(node)

    def _refresh_window(self, node: TreeNode) -> None:
        i = self.index
        self.tree.lru["swa"].promote_path(
            node, self.tree.root, lambda n: n.data[i].value is not None, window=self.window + self.page_size
        )

    # ---- insert -----------------------------------------------------------
    def on_insert_overlap(self, node, prefix_len, total_prefix_len, value, params, result, actions) -> int:
        """Recover a tombstone the request still has live SWA for: the part at or above
        the request's ``swa_evicted_seqlen`` takes the incoming slots; below it, they
        are duplicates (freed by the tree, Full side only)."""
        start, end = total_prefix_len, total_prefix_len + prefix_len
        if node is self.tree.just_unevicted:  # the host tier's: host.py
            self.tree.just_unevicted = None
            self.recover_after_unevict(node, start, end, value, params, actions)
            return prefix_len
        if params.prev_prefix_len >= end or node.data[self.index].value is not None:
            return prefix_len
        live = self._clip_to_window(node, start, end, params.swa_evicted_seqlen)
        if live is None:
            return prefix_len
        node, live_start = live
        incoming = value[live_start:end]
        full = node.data[0]
        if full.lock_ref > 0:  # someone uses the old Full KV: keep it, take the incoming SWA
            actions.append(RecoverLockedSWA(node.id, full.value, incoming))
        else:
            old = full.value
            full.value = incoming
            if self.tree.events.enabled:  # Full's data changed too: say so, not only the free
                self.tree.events.emit(EventKind.SET, "full", node.id, Cause.REQUEST, node.length, "swa recovery takes the incoming slots")
            actions.append(FreeDeviceKVFullOnly([old], node.id, Cause.DUPLICATE))
            actions.append(RebuildSWA(node.id, incoming))
        return live_start - start

    def _clip_to_window(self, node: TreeNode, start: int, end: int, window_start: int):
        """(node, live_start) for the in-window part of a tombstoned span, splitting the
        node at the window boundary; None when the whole span is out of the window."""
        live_start = max(start, window_start)
        if live_start >= end:
            return None
        if live_start > start:
            self.tree.split_node(node, live_start - start)  # ``node`` becomes the in-window lower part
        return node, live_start

    def commit_insert(self, node, is_new_leaf, params, result, actions) -> None:
        """A new leaf gets SWA only for its in-window part (the rest stays a tombstone),
        capped to one page-aligned window so a lock on it pins one window of pool."""
        if params.swa_branching_seqlen is not None:
            result.swa_branch_inserted = len(params.key) >= params.swa_branching_seqlen
        if not is_new_leaf:
            return
        start = result.prefix_len
        live = self._clip_to_window(node, start, start + node.length, params.swa_evicted_seqlen)
        if live is None:
            return
        node = live[0]
        capped = self._cap_leaf(node)
        if capped is not None:  # older part first, so the tail ends up more recent
            actions.append(RebuildSWA(capped.id, capped.data[0].value))
        actions.append(RebuildSWA(node.id, node.data[0].value))

    def _cap_leaf(self, leaf: TreeNode) -> Optional[TreeNode]:
        if leaf.data[self.index].lock_ref > 0 or leaf.length <= self.window_tail:
            return None
        split_at = leaf.length - self.window_tail
        if split_at % self.page_size or leaf.length % self.page_size:
            return None
        return self.tree.split_node(leaf, split_at)

    # ---- split ------------------------------------------------------------
    def redistribute_on_split(self, new_parent: TreeNode, child: TreeNode) -> None:
        i = self.index
        upper, lower = new_parent.data[i], child.data[i]
        upper.lock_ref = lower.lock_ref
        upper.session_ref = lower.session_ref  # the window a session covers may span the cut
        if lower.value is not None:
            cut = new_parent.length
            value = lower.value
            upper.value, lower.value = value[:cut], value[cut:]
        # the window-lock boundary marks a node's older edge, which now belongs to the parent
        uuid = lower.metadata.pop("uuid", None)
        if uuid is not None:
            upper.metadata["uuid"] = uuid
        if self.tree.host_policy is not None:
            self.split_host_data(new_parent, child)

    # ---- eviction ---------------------------------------------------------
    def evict_component(self, node: TreeNode, batch: EvictionBatch) -> int:
        if node.data[self.index].value is None:
            return 0
        n = node.length
        batch.free("swa", node.data[0].value, n)  # freed through the Full->SWA mapping
        self.tree.evictable[self.index] -= n
        return n

    # ---- locks ------------------------------------------------------------
    def acquire_lock(self, node: TreeNode, receipt: IncLockRefResult) -> None:
        """Lock the segment covering the trailing window, tombstones included, and
        stamp the node where coverage was reached (None: the segment hit the root)."""
        i, tree = self.index, self.tree
        covered, boundary = 0, None
        while node is not tree.root and covered < self.window:
            cd = node.data[i]
            if cd.lock_ref == 0 and cd.value is not None:
                self._move_to_protected(node)
            cd.lock_ref += 1
            if tree.events.enabled:
                self._emit(EventKind.LOCK, node, Cause.REQUEST, node.length, f"lock_ref={cd.lock_ref}")
            covered += node.length
            if covered >= self.window:
                boundary = cd.metadata.get("uuid")
                if boundary is None:
                    boundary = cd.metadata["uuid"] = tree.new_uuid()
            node = node.parent
        receipt.component_lock_uuids[self.name] = boundary

    def _segment(self, node: TreeNode, receipt) -> list[TreeNode]:
        """The nodes a receipt's window lock covers, from ``node`` up to its boundary
        (``LookupError`` if the boundary is not above it)."""
        boundary = receipt.component_lock_uuids.get(self.name)
        root, i = self.tree.root, self.index
        out = []
        while node is not root:
            out.append(node)
            if boundary is not None and node.data[i].metadata.get("uuid") == boundary:
                return out
            node = node.parent
        if boundary is not None:
            raise LookupError(f"swa lock boundary {boundary} is not above the receipt's node")
        return out

    def locked_nodes(self, node: TreeNode, receipt) -> list:
        return self._segment(node, receipt)

    def check_release(self, node: TreeNode, receipt: DecLockRefParams) -> Optional[str]:
        try:
            segment = self._segment(node, receipt)
        except LookupError as exc:
            return str(exc)
        i = self.index
        for cur in segment:
            if cur.data[i].lock_ref <= 0:
                return f"swa segment release hit lock_ref=0 on node {cur.id}"
        self._checked = (receipt, segment)  # the release that follows walks it no more
        return None

    def release_lock(self, node: TreeNode, receipt: DecLockRefParams) -> None:
        checked, self._checked = self._checked, None
        for cur in checked[1] if checked is not None and checked[0] is receipt else self._segment(node, receipt):
            self._unlock_one(cur, None)

    def release_window_lock(self, node: TreeNode, receipt, batch: EvictionBatch) -> None:
        """Early release once decode has moved past the window: a node whose last SWA
        lock goes and that is an evictable leaf loses its SWA data right away (into
        ``batch``, a WINDOW one)."""
        for cur in self._segment(node, receipt):
            self._unlock_one(cur, batch)

    def _unlock_one(self, cur: TreeNode, batch: Optional[EvictionBatch]) -> None:
        cd = cur.data[self.index]
        cd.lock_ref -= 1
        if self.tree.events.enabled:
            self._emit(EventKind.UNLOCK, cur, Cause.REQUEST, cur.length, f"lock_ref={cd.lock_ref}")
        if cd.lock_ref:
            return
        if cd.value is not None:
            self._move_to_evictable(cur)
        # no leaf-state update: the receipt's Full lock still holds every segment node (Full
        # releases last), so none can be a device leaf yet; the tree's release updates it
        if batch is not None and cd.value is not None and cur.in_leaf_set:
            self.tree.tombstone(cur, self, batch, cascade=False)

    # ---- request caching --------------------------------------------------
    def caching_len(self, req, length: int, finished: bool) -> Optional[int]:
        """When the request's match found Full KV past the last live window, stop the
        checkpoint at that branch point, so the tree gets a node boundary where a window
        can be rebuilt (not when another component's checkpoints decide the length,
        e.g. Mamba's)."""
        branch = req.swa_branching_seqlen
        if branch is None or branch <= req.cache_protected_len or self._others_set_checkpoints:
            return None
        spanned = branch + int(self.cache.bigram_keys)  # EAGLE: N pairs span N + 1 tokens
        return None if spanned > length else spanned

    def prepare_for_caching_req(self, req, params: InsertParams, length: int, finished: bool) -> Optional[int]:
        """Forward the request's window floor and its branch point."""
        params.swa_evicted_seqlen = req.swa_evicted_seqlen
        branch = self.caching_len(req, length, finished)
        if branch is not None:
            params.swa_branching_seqlen = req.swa_branching_seqlen
        return branch

    @property
    def _others_set_checkpoints(self) -> bool:
        return any(c.sets_checkpoints for c in self.tree.components if c is not self)

    def cleanup_after_caching_req(self, req, finished: bool, result, params=None) -> None:
        if result is None or not result.swa_branch_inserted:
            return
        req.swa_branching_seqlen = None
        if not finished and self.frees_out_of_window:  # the branch is cached: the rest of the window can slide now
            # on the key of what is computed so far (v0.5.23's get_fill_ids(), cut at the
            # forward's end): a request mid chunked prefill has no KV past kv_len to free
            self.slide_window(req, req.kv_len - int(self.cache.bigram_keys) - 1)

    def free_out_of_window_slots(self, req, pre_len: int, params: InsertParams) -> None:
        if self.frees_out_of_window:
            self.slide_window(req, pre_len)
        params.swa_evicted_seqlen = req.swa_evicted_seqlen

    def slide_window(self, req, pre_len: int) -> int:
        """Free the request's own SWA slots that fell out of the window before
        position ``pre_len`` (up to ``window_floor``)."""
        evicted = max(req.swa_evicted_seqlen, req.cache_protected_len)  # the tree owns everything below
        new = self.window_floor(req, pre_len)
        if new is None:
            return 0
        freed = 0
        if new > evicted:
            freed = self.pool.free_for(req.kv_indices[evicted:new])
            self._emit(EventKind.FREE, None, Cause.WINDOW, freed, f"{req.rid} positions {evicted}..{new}")
        req.swa_evicted_seqlen = max(evicted, new)
        return freed

    def window_floor(self, req, pre_len: int) -> Optional[int]:
        """Where a slide at ``pre_len`` moves the request's window cursor (None: not
        yet due), keeping whole pages and max(window, page) rounded up to a page, so
        the leaf a later insert makes still has a live window, and the window behind
        another component's newest checkpoint (Mamba's), where a later match may end."""
        ps, evicted = self.page_size, req.swa_evicted_seqlen
        if pre_len - self.window < evicted + 1:
            return None
        evicted = max(evicted, req.cache_protected_len)
        threshold = pre_len - ceil_align(max(self.window, ps), ps)
        for other in self.tree.components:  # a match may end on another component's checkpoint:
            tracked = other.checkpoint_seqlen(req) if other is not self else None  # keep the window behind it
            if tracked is not None:
                threshold = min(threshold, tracked - self.window)  # v0.5.23's swa_retain_floor
        new = max(evicted, threshold)
        return new - new % ps

    def request_extras(self, req) -> dict:
        """The window cursor: positions below hold no live SWA slot of the request."""
        return {"evicted_seqlen": req.swa_evicted_seqlen}

    # ---- pools ------------------------------------------------------------
    def held_by_requests(self) -> np.ndarray:
        """The SWA pages running requests hold (mapped from their own Full slots; a
        page as often as its slots), read on the host in one gather: every step's
        snapshot asks."""
        full = own_slots(self.cache.kv_holders())
        if not full.shape[0]:  # no running request holds any: nothing to read
            return full
        swa = gather(self.pool.mapping, full)
        return swa[swa >= 0] // self.page_size

    def pool_views(self) -> dict:
        held = distinct(self.held_by_requests()) * self.page_size
        pool = self.pool
        return {
            "swa": PoolView("swa", pool.size, pool.available_size(), self.tree.evictable[self.index], self.tree.protected[self.index], held)
        }

    def free_device_values(self, values: list[torch.Tensor], cause: Cause, node: Optional[int]) -> None:
        full = values[0] if len(values) == 1 else torch.cat(values)
        freed = self.pool.free_for(full)
        if freed:
            self._emit(EventKind.FREE, None, cause, freed, "pool=swa")

    def apply_action(self, action: ComponentAction) -> None:
        match action:
            case RebuildSWA(node=node, source=source):
                self.tree.set_component_value(node, self.name, self.pool.translate(source), Cause.WINDOW)
            case RecoverLockedSWA(node=node, kept=kept, incoming=incoming):
                swa = self.pool.move_mapping(kept, incoming)
                self.cache.free_kv([incoming], Cause.DUPLICATE, node, full_only=True)  # its SWA moved
                self.tree.set_component_value(node, self.name, swa, Cause.WINDOW)
                self._emit(EventKind.RECOVER, None, Cause.WINDOW, int(kept.shape[0]), "locked Full kept")
            case _:
                super().apply_action(action)

    def peer_shortfall(self, num_tokens: int) -> int:
        pool = self.pool.allocator
        return pool.pages_for(num_tokens) * self.page_size - pool.available_size()

    def peer_alloc(self, full_slots: torch.Tensor) -> None:
        self.pool.alloc_for(full_slots)

    def peer_continue(self, last_slot: torch.Tensor, full_slots: torch.Tensor) -> None:
        start = self.pool.translate(last_slot)
        offsets = torch.arange(1, full_slots.shape[0] + 1, dtype=torch.int64, device=full_slots.device)
        self.pool.mapping[full_slots] = start + offsets

    def peer_free(self, full_slots: torch.Tensor, cause: Cause, node: Optional[int]) -> None:
        freed = self.pool.free_for(full_slots)
        if freed:
            self._emit(EventKind.FREE, None, cause, freed, "pool=swa")

    def peer_write(self, full_slots: torch.Tensor, fingerprints) -> None:  # fingerprints: a tensor or a host array
        self.pool.write(full_slots, fingerprints)
