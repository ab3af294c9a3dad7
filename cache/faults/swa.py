"""Faults in the swa component's behaviour (see the package docstring for the rules).

Each installer patches one cache instance: its SWA component, its SWA pool or its tree,
never a class. The faulty copies wrap the correct bound methods where they can, so the
only code that differs is the upstream bug, and each calls ``fired`` exactly when its
result differs from what the correct code would have done.
"""

from __future__ import annotations

from . import Fault, fired  # noqa: F401  (installers call fired)

RUN_NOT_RESET = "swa-run-not-reset-at-tombstone"
UNLOCK_AFTER_SPLIT = "swa-unlock-after-split"
RECOVERY_STALE_MAPPING = "swa-recovery-stale-mapping"
LAST_LEAF_ALL_TOMBSTONE = "swa-last-leaf-all-tombstone"
UNFINISHED_BOUNDARY_IGNORED = "swa-unfinished-boundary-ignored"
BRANCH_TAIL_EVICTED_FIRST = "swa-branch-tail-evicted-first"


# ---- sgl-project/sglang#17061 ----------------------------------------------------------
def _install_run_not_reset(cache) -> None:
    """The match validator resets its live-SWA run at a tombstone only when the run had
    already reached a window (the pre-#17061 ``if tombstone and run >= window`` guard);
    a short run carries on across the gap and adds up with the tokens after it, so a
    match can end where its last window crosses evicted SWA KV.

    ``create_match_validator`` is looked up on the component by both ``match_prefix``
    and ``peek_match``, so both walk with the faulty rule (they must agree: new_request
    asserts it). The tree's two entry points are wrapped only to compare each walk with
    a read-only replay under the correct rule, and fire when the match length differs."""
    swa, tree = cache.by_name["swa"], cache.tree
    i, window = swa.index, swa.window
    correct_validator = swa.create_match_validator
    peek, match = tree.peek_match, tree.match_prefix
    faulty = [True]

    def create_match_validator():
        if not faulty[0]:
            return correct_validator()
        run = [float("inf")]

        def validate(node, length: int) -> bool:
            if node.data[i].value is None:
                if run[0] >= window:  # the bug: a run still short of a window is not reset
                    run[0] = 0
                return False
            run[0] += length
            return run[0] >= window

        return validate

    def correct_length(key) -> int:
        faulty[0] = False
        try:
            return sum(n for _, n in peek(key))
        finally:
            faulty[0] = True

    def peek_match(key):
        path = peek(key)
        if sum(n for _, n in path) != correct_length(key):
            fired(cache, RUN_NOT_RESET)
        return path

    def match_prefix(key):
        want = correct_length(key)  # before the real walk: it may split nodes
        result = match(key)
        if result.prefix_len != want:
            fired(cache, RUN_NOT_RESET)
        return result

    swa.create_match_validator = create_match_validator
    tree.peek_match = peek_match
    tree.match_prefix = match_prefix


# ---- sgl-project/sglang#24153 ----------------------------------------------------------
def _install_unlock_after_split(cache) -> None:
    """A split inside a held window lock copies the SWA lock count to the new upper half
    but drops the boundary stamp: it is taken off the lower half and never handed to the
    upper one. A release of a lock taken before the split then no longer finds where its
    acquire stopped, walks on past the window and reaches nodes it never locked
    (``dec_lock_ref on node with swa_lock_ref=0``), on every retry."""
    swa, tree = cache.by_name["swa"], cache.tree
    i = swa.index
    redistribute = swa.redistribute_on_split

    def redistribute_on_split(new_parent, child) -> None:
        redistribute(new_parent, child)  # moves the stamp to the upper half ...
        uuid = new_parent.data[i].metadata.pop("uuid", None)  # ... which loses it
        # A stamp no held window lock ends at is dead data (the next lock over that edge
        # stamps it afresh): dropping it changes nothing a later operation does.
        if uuid is not None and any(
            not r.swa_released and r.component_lock_uuids.get(swa.name) == uuid for r in tree.live_receipts.values()
        ):
            fired(cache, UNLOCK_AFTER_SPLIT)

    swa.redistribute_on_split = redistribute_on_split


# ---- sgl-project/sglang#27586 ----------------------------------------------------------
def _install_recovery_stale_mapping(cache) -> None:
    """Two halves of one upstream bug. (1) The stale mapping: when SWA eviction frees a
    tombstoned node's SWA slots, the node's Full->SWA mapping entries keep pointing at
    them (upstream they went stale under HiCache churn), although a tombstone owns no
    SWA slot. (2) Recovering that tombstone on insert frees the node's old Full slots
    through the full free, which also frees whatever SWA slots they map to, instead of
    on the Full side only. When the insert's fresh SWA slots reuse the ones the
    tombstone gave back, that releases a live slot and the pool's books drift."""
    import torch

    from ..observe.actions import FreeDeviceKV, FreeDeviceKVFullOnly

    swa = cache.by_name["swa"]
    pool = swa.pool
    full_pool = cache.kv_pool
    free_device_values = swa.free_device_values
    on_insert_overlap = swa.on_insert_overlap

    def stale_free_device_values(values, cause, node) -> None:
        full = values[0] if len(values) == 1 else torch.cat(values)
        mapped = pool.translate(full)  # a copy: read before the free clears it
        free_device_values(values, cause, node)
        # a tombstone keeps its Full slots (they are still handed out): its mapping stays
        pages = full if full_pool.page_size == 1 else torch.div(full, full_pool.page_size, rounding_mode="floor")
        stale = (mapped >= 0) & (full_pool.owned_mask()[pages] > 0)
        if bool(stale.any()):
            pool.mapping[full[stale]] = mapped[stale]
            fired(cache, RECOVERY_STALE_MAPPING)

    def recover_through_mapping(node, prefix_len, total_prefix_len, value, params, result, actions) -> int:
        start = len(actions)
        taken = on_insert_overlap(node, prefix_len, total_prefix_len, value, params, result, actions)
        for k in range(start, len(actions)):
            action = actions[k]
            if type(action) is FreeDeviceKVFullOnly:  # the unlocked-Full recovery's free of the old slots
                actions[k] = FreeDeviceKV(action.values, action.node, action.cause)
                if bool((pool.translate(action.values[0]) >= 0).any()):
                    fired(cache, RECOVERY_STALE_MAPPING)
        return taken

    swa.free_device_values = stale_free_device_values
    swa.on_insert_overlap = recover_through_mapping


# ---- sgl-project/sglang#29860 ----------------------------------------------------------
def _install_last_leaf_all_tombstone(cache) -> None:
    """The eager out-of-window free sets the frontier to ``pre_len - window``, page
    floored, without the ``max(window, page_size)`` margin. With page_size >
    sliding_window it can land on page_floor(seq_len), the end of what the following
    insert caches, so the new last leaf is entirely out of window: an all-tombstone
    leaf the follow-up match refuses."""
    from ..observe.events import Cause, EventKind
    from ..basics.keys import ceil_align

    swa = cache.by_name["swa"]
    pool, window, ps = swa.pool, swa.window, swa.page_size
    keep = ceil_align(max(window, ps), ps)

    def slide_window(req, pre_len: int) -> int:
        evicted = req.swa_evicted_seqlen
        if pre_len - window < evicted + 1:
            return 0
        evicted = max(evicted, req.cache_protected_len)  # the tree owns everything below
        right = max(evicted, pre_len - keep)
        right -= right % ps
        new = max(evicted, pre_len - window)  # the bug: no page margin behind the insert boundary
        new -= new % ps
        if max(evicted, new) != max(evicted, right):
            fired(cache, LAST_LEAF_ALL_TOMBSTONE)
        freed = 0
        if new > evicted:
            freed = pool.free_for(req.kv_indices[evicted:new])
            swa._emit(EventKind.FREE, None, Cause.WINDOW, freed, f"{req.rid} positions {evicted}..{new}")
        req.swa_evicted_seqlen = max(evicted, new)
        return freed

    swa.slide_window = slide_window


# ---- sgl-project/sglang#30845, #36909 ----------------------------------------------------
def _install_unfinished_boundary_ignored(cache) -> None:
    """checkpoint frees the request's out-of-window SWA slots but inserts with
    the default ``swa_evicted_seqlen`` 0 instead of the request's boundary, so positions
    whose SWA slots are already back in the pool enter the tree as live SWA.

    The boundary only matters where the insert consults it: a new leaf starting below
    it, or a tombstone below it that the insert may recover (duplicates below it have
    no SWA slot left to free either way). The SWA insert hooks are wrapped only to fire
    there, comparing what the lost boundary would have decided."""
    swa = cache.by_name["swa"]
    i = swa.index
    free_out_of_window_slots = swa.free_out_of_window_slots
    on_insert_overlap, commit_insert = swa.on_insert_overlap, swa.commit_insert
    lost: list = [None, 0]  # the insert params that lost their boundary, and the boundary

    def boundary_not_forwarded(req, pre_len: int, params) -> None:
        free_out_of_window_slots(req, pre_len, params)
        lost[:] = [params, params.swa_evicted_seqlen]
        params.swa_evicted_seqlen = 0  # the bug: the insert gets the default

    def floor_of(params) -> int:
        return lost[1] if lost[0] is params else 0

    def overlap(node, prefix_len, total_prefix_len, value, params, result, actions) -> int:
        if (
            floor_of(params) > total_prefix_len
            and params.prev_prefix_len < total_prefix_len + prefix_len
            and node.data[i].value is None
        ):  # the correct code recovers less of this tombstone, or none of it
            fired(cache, UNFINISHED_BOUNDARY_IGNORED)
        return on_insert_overlap(node, prefix_len, total_prefix_len, value, params, result, actions)

    def commit(node, is_new_leaf, params, result, actions) -> None:
        if is_new_leaf and floor_of(params) > result.prefix_len:  # the correct leaf starts as a tombstone
            fired(cache, UNFINISHED_BOUNDARY_IGNORED)
        lost[:] = [None, 0]
        commit_insert(node, is_new_leaf, params, result, actions)

    swa.free_out_of_window_slots = boundary_not_forwarded
    swa.on_insert_overlap = overlap
    swa.commit_insert = commit


# ---- sgl-project/sglang#35515 ----------------------------------------------------------
def _install_branch_tail_evicted_first(cache) -> None:
    """Using a branch refreshes only the node its match (or insert) ended on, not the
    other nodes of its trailing window. Those age as if the branch were idle, so SWA
    eviction, walking its LRU with no notion of where a branch ends, tombstones them
    first: one tombstone inside a branch's last ``window`` tokens makes the whole branch
    unmatchable (a cliff back to the previous valid boundary) while its live end keeps
    its SWA KV."""
    swa, tree = cache.by_name["swa"], cache.tree
    i, reach = swa.index, swa.window + swa.page_size

    def include(node) -> bool:
        return node.data[i].value is not None

    def refresh_end_only(node) -> None:
        lru, root = tree.lru["swa"], tree.root
        block, seen, cur = [], 0, node  # what the correct refresh moves up, deepest first
        while cur is not root and cur is not None and seen < reach:
            if include(cur):
                block.append(cur)
            seen += cur.length
            cur = cur.parent
        lru.promote_path(node, root, include, window=1)  # the bug: the match end alone
        order = iter(lru)
        if not all(next(order, None) is b for b in block):  # the correct order differs
            fired(cache, BRANCH_TAIL_EVICTED_FIRST)

    swa._refresh_window = refresh_end_only


FAULTS: list[Fault] = [
    Fault(
        RUN_NOT_RESET,
        "sgl-project/sglang#17061",
        ("swa",),
        "the match walk passes a tombstone without resetting a short window run, so the match boundary is wrong",
        _install_run_not_reset,
    ),
    Fault(
        UNLOCK_AFTER_SPLIT,
        "sgl-project/sglang#24153",
        ("swa",),
        "a split inside a held window lock drops its boundary stamp, so dec_lock_ref walks past the window",
        _install_unlock_after_split,
    ),
    Fault(
        RECOVERY_STALE_MAPPING,
        "sgl-project/sglang#27586",
        ("swa",),
        "tombstone recovery frees the old Full slots through a stale Full->SWA mapping, releasing a live SWA slot",
        _install_recovery_stale_mapping,
    ),
    Fault(
        LAST_LEAF_ALL_TOMBSTONE,
        "sgl-project/sglang#29860",
        ("swa",),
        "eager out-of-window freeing keeps no page margin, so with page_size > window the last leaf is all tombstone",
        _install_last_leaf_all_tombstone,
    ),
    Fault(
        UNFINISHED_BOUNDARY_IGNORED,
        "sgl-project/sglang#30845, sgl-project/sglang#36909",
        ("swa",),
        "checkpoint does not forward swa_evicted_seqlen, inserting already-freed SWA pages as live",
        _install_unfinished_boundary_ignored,
    ),
    Fault(
        BRANCH_TAIL_EVICTED_FIRST,
        "sgl-project/sglang#35515",
        ("swa",),
        "a match refreshes only its end node, so SWA eviction tombstones a branch's trailing window first",
        _install_branch_tail_evicted_first,
    ),
]
