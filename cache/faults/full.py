"""Faults in the full component's behaviour and in the tree core it drives (see the
package docstring for the rules).

Each installer patches one cache instance: a bound method of the Full component, the
tree or the controller is replaced by an instance attribute (a faulty copy, or a
closure around the original), which is what every internal ``self.x(...)`` /
``component.x(...)`` call looks up. Nothing heavy is imported here at module import
time; the installers import what they need when they run.
"""

from __future__ import annotations

import types

from . import Fault, fired

# ---- 1. mini-sglang#52: the lock walk steps to the parent before locking ----------------

LOCK_SKIPS_MATCHED_NODE = "lock-skips-matched-node"


def _install_lock_skips_matched_node(cache) -> None:
    """mini-sglang's ``lock_handle`` had ``node = node.parent`` as the first line of its
    loop: the matched node itself was never locked, its ancestors were and so was the
    root (the last parent). PR #52 moved the line in both directions (lock and unlock),
    so the faulty copies here skip the anchor on both sides: a receipt's lock and its
    release stay symmetric, and only the anchor is left unprotected."""
    from ..observe.events import Cause, EventKind

    full = cache.by_name["full"]

    def acquire_lock(self, node, receipt) -> None:
        i = self.index
        tree = self.tree
        root = tree.root
        leaves = tree.leaves
        events = tree.events.enabled
        delta = 0
        if node is not root:  # from the root both walks do nothing
            fired(cache, LOCK_SKIPS_MATCHED_NODE)
        while node is not root:
            node = node.parent  # the bug: moved before the increment
            cd = node.data[i]
            if cd.lock_ref == 0:
                delta += node.length
                if node.in_leaf_set:
                    leaves.discard(node)
            cd.lock_ref += 1
            if events:
                self._emit(EventKind.LOCK, node, Cause.REQUEST, node.length, f"lock_ref={cd.lock_ref}")
        tree.evictable[i] -= delta
        tree.protected[i] += delta
        receipt.delta = delta

    def release_lock(self, node, receipt) -> None:
        i = self.index
        tree = self.tree
        root = tree.root
        events = tree.events.enabled
        if node is not root:
            fired(cache, LOCK_SKIPS_MATCHED_NODE)
        while node is not root:
            node = node.parent  # the same misplaced line on the unlock side
            cd = node.data[i]
            if cd.lock_ref == 1:
                n = node.length
                tree.evictable[i] += n
                tree.protected[i] -= n
                cd.lock_ref = 0
                tree.update_leaf_state(node)
            else:  # no assert: upstream had none, and a crash would hide the checker's report
                cd.lock_ref -= 1
            if events:
                self._emit(EventKind.UNLOCK, node, Cause.REQUEST, node.length, f"lock_ref={cd.lock_ref}")

    full.acquire_lock = types.MethodType(acquire_lock, full)
    full.release_lock = types.MethodType(release_lock, full)


# ---- 2. mllm#656: _add_leaf takes a leaf parent out of evictable, _split_node does not ----

SPLIT_EVICTABLE_DRIFT = "split-evictable-drift"


def _install_split_evictable_drift(cache) -> None:
    """pymllm's RadixCache subtracted a parent's tokens from the evictable counter when
    a leaf gained its first child (``_add_leaf``), while ``_split_node``, the other way a
    leaf becomes an inner node, made no such adjustment; nothing added them back either.
    The fix dropped the adjustment (every unlocked token is evictable). The faulty copy
    puts it back into our ``_add_leaf`` (the tree's ``insert`` calls ``self._add_leaf``)."""
    tree = cache.tree
    add_leaf = tree._add_leaf

    def faulty_add_leaf(parent, key, extra_key, value, priority):
        # an unlocked leaf (no child yet) about to become an inner node
        was_leaf = parent is not tree.root and not parent.children and parent.data[0].lock_ref == 0
        node = add_leaf(parent, key, extra_key, value, priority)
        if was_leaf:
            tree.evictable[0] -= parent.length  # the bug: "inner nodes are not evictable"
            fired(cache, SPLIT_EVICTABLE_DRIFT)
        return node

    tree._add_leaf = faulty_add_leaf


# ---- 3. sglang#35270: shared prefix pages counted back into evictable per holder ---------

EVICTABLE_DOUBLE_COUNT = "evictable-double-count"


def _install_evictable_double_count(cache) -> None:
    """The idle check found ``available + evictable > total``: evictable held pages
    shared by several requests more than once. The faulty Full release returns a node's
    tokens to evictable whenever one of its holders lets go, not only when the last one
    does (lock_ref 1 -> 0), so every extra holder of a shared prefix adds its pages to
    evictable once more; the lock counts themselves stay right."""
    from ..observe.events import Cause, EventKind

    full = cache.by_name["full"]

    def release_lock(self, node, receipt) -> None:
        i = self.index
        tree = self.tree
        root = tree.root
        events = tree.events.enabled
        shared = False
        while node is not root:
            cd = node.data[i]
            n = node.length
            if cd.lock_ref == 1:
                tree.evictable[i] += n
                tree.protected[i] -= n
                cd.lock_ref = 0
                tree.update_leaf_state(node)
            else:
                if cd.lock_ref > 1:  # the bug: still held by another request, counted anyway
                    tree.evictable[i] += n
                    tree.protected[i] -= n
                    shared = True
                cd.lock_ref -= 1
            if events:
                self._emit(EventKind.UNLOCK, node, Cause.REQUEST, node.length, f"lock_ref={cd.lock_ref}")
            node = node.parent
        if shared:
            fired(cache, EVICTABLE_DOUBLE_COUNT)

    full.release_lock = types.MethodType(release_lock, full)


# ---- 4. sglang#29291 (+#37494): a release that trusts whatever node it is handed ----------

RELEASE_DETACHED_LOCK = "release-detached-lock"


def _install_release_detached_lock(cache) -> None:
    """``UnifiedRadixCache.dec_lock_ref`` walked up from the node the caller passed,
    whether or not that node still hung under the root (#29291: a stale request node)
    and whether or not the caller had ever locked it (#37494: profiling requests that
    never took a lock, whose cleanup then aborted the run). Here a release whose receipt
    is not held (released twice, never taken) or is anchored on another node is not
    refused before it changes anything: the faulty copy first walks the Full lock path
    up from the node named, decrementing lock_refs (to -1 and below) and moving counters
    as a real release would, and only then fails with the refusal's message (the abort
    upstream ended with). A node already evicted is still found (the faulty
    ``inc_lock_ref`` keeps every anchor it locked) and its stale parent chain is walked,
    reaching live ancestors that other requests may hold."""
    from ..basics.errors import LockError

    tree = cache.tree
    locks = tree.locks  # the lock calls' own object: the cache and the tree core both answer through it
    inc_lock_ref, dec_lock_ref = locks.inc_lock_ref, locks.dec_lock_ref
    anchors: dict = {}  # node id -> node object, kept after the node leaves the tree

    def faulty_inc_lock_ref(node_id, skip=(), host_only=False):
        receipt = inc_lock_ref(node_id, skip, host_only)
        anchors[node_id] = tree.nodes[node_id]
        return receipt

    def faulty_dec_lock_ref(node_id, params, skip_swa=False):
        held = tree.live_receipts.get(params.receipt_id)
        if held is not None and held.node_id == node_id and params.node_id == node_id:
            stolen = _stolen_lock(tree, node_id)
            if stolen is not None:  # an earlier faulty release took this lock
                fired(cache, RELEASE_DETACHED_LOCK)
                raise LockError(
                    f"full lock_ref={stolen.data[0].lock_ref} on node {stolen.id} under the live lock receipt "
                    f"{params.receipt_id}: a release of a lock not held took it (upstream: the lock_ref > 0 assert)"
                )
            return dec_lock_ref(node_id, params, skip_swa)  # a valid release: unchanged
        node = tree.nodes.get(node_id) or anchors.get(node_id)
        if node is None:  # nothing to walk from: refused as the correct code refuses
            return dec_lock_ref(node_id, params, skip_swa)
        try:
            dec_lock_ref(node_id, params, skip_swa)  # refuses (receipt not held / elsewhere)
        except LockError as exc:
            refusal = str(exc)
        else:  # pragma: no cover - the checks above mirror the refusal
            return None
        walked, visible = _walk_release(tree, node)
        if not walked:  # the root's own (empty) path: nothing changed, a plain refusal
            raise LockError(refusal)
        if visible:  # a walk over detached nodes only (lock_refs of nodes no one can reach) changes nothing seen
            fired(cache, RELEASE_DETACHED_LOCK)
        raise LockError(f"{refusal}; released anyway along nodes {walked}")

    locks.inc_lock_ref = faulty_inc_lock_ref
    locks.dec_lock_ref = faulty_dec_lock_ref


def _stolen_lock(tree, node_id):
    """The first node on a held receipt's Full path whose lock_ref is no longer > 0 (a
    faulty release took it), or None. The correct release asserts there mid-walk; the
    faulty cache refuses before anything changes, so a run reports it instead of
    crashing."""
    node, root = tree.nodes.get(node_id), tree.root
    while node is not None and node is not root:
        if node.data[0].lock_ref <= 0:
            return node
        node = node.parent
    return None


def _walk_release(tree, node) -> tuple[list[int], bool]:
    """Upstream's Full release on an unchecked node: up the parent links to the root (or
    to where the chain ends), moving a node's tokens back to evictable at lock_ref 1 and
    decrementing every lock_ref, to -1 and below. Returns the ids walked, and whether the
    walk changed anything the cache still holds (a live node, or the counters)."""
    from ..observe.events import Cause, EventKind

    full = tree.components[0]
    root, live = tree.root, tree.nodes
    events = tree.events.enabled
    walked: list[int] = []
    visible = False
    while node is not None and node is not root and node.id not in walked:  # a looping chain stops
        walked.append(node.id)
        cd = node.data[0]
        if cd.lock_ref == 1:
            tree.evictable[0] += node.length
            tree.protected[0] -= node.length
            visible = True
        cd.lock_ref -= 1
        if live.get(node.id) is node:
            visible = True
            tree.update_leaf_state(node)
            if tree._touched is not None:
                tree._touched.add(node.id)
            if events:
                full._emit(EventKind.UNLOCK, node, Cause.REQUEST, node.length, f"lock_ref={cd.lock_ref}")
        node = node.parent
    return walked, visible


# ---- 5. sglang#28692: a partial page looked up before the key is cut to whole pages -----

PARTIAL_PAGE_EMPTY_NODE = "partial-page-empty-node"


def _install_partial_page_empty_node(cache) -> None:
    """MambaRadixCache matched a page-limited key (63 logical tokens backed by 64 raw
    ones) before cutting it to whole pages: the child lookup read the raw page and found
    a 64-token child, the match length (63) was rounded down to whole pages (0), and the
    child was split at 0. The empty upper node went into the parent's children under the
    child's old key while its own key was empty, so a later tombstone cleanup found no
    child under ``()`` and crashed.

    Our keys carry no hidden raw tokens, so the faulty match looks the trailing partial
    page up as that raw lookup did: when the whole pages of the key end on a node
    boundary (or there are none) and the partial page is the start of a child's key,
    that child is split at 0 before the (otherwise correct) match runs. The empty node
    is filed under the child's old key, as upstream filed it; it keeps that key as its
    own ``child_key`` so our removal still finds it (upstream's recomputed ``()`` is what
    crashed), and the checker names the empty key and the wrong filing."""
    from ..basics.keys import TOKEN_BYTES

    tree = cache.tree
    match_prefix = tree.match_prefix

    def faulty_match_prefix(key):
        data = key.data
        ps = tree.page_size
        ntok = len(data) // TOKEN_BYTES
        limit = (ntok - ntok % ps) * TOKEN_BYTES
        if limit == len(data):  # no partial page: the bug cannot show
            return match_prefix(key)
        ek, pb = key.namespace, tree.page_bytes
        node, off = tree.root, 0
        while off < limit:  # whole nodes only, read-only
            ck = data[off : off + pb] if ek is None else (ek, data[off : off + pb])
            child = node.children.get(ck)
            if child is None or not data.startswith(child.key, off) or off + len(child.key) > limit:
                return match_prefix(key)  # the correct match stops inside or before a node
            node, off = child, off + len(child.key)
        tail = data[limit:]
        for child in tree.iter_children(node):
            if child.namespace == ek and child.key.startswith(tail):
                _split_at_zero(tree, child)
                fired(cache, PARTIAL_PAGE_EMPTY_NODE)
                break
        return match_prefix(key)

    tree.match_prefix = faulty_match_prefix


def _split_at_zero(tree, child) -> None:
    """Upstream's ``_split_node(key, child, 0)``: an empty node between ``child`` and
    its parent, filed under the child's old key."""
    parent, old_key = child.parent, child.child_key
    empty = tree._split_node(child, 0)  # files it under its own (empty) child key
    parent.children.pop(empty.child_key, None)
    parent.children[old_key] = empty  # where upstream put it: replacing the child
    empty.child_key = old_key


# ---- 6. sglang#35821: cache_len 0 still inserts, and the root takes the state ------------

GHOST_EMPTY_NODE = "ghost-empty-node"


def _install_ghost_empty_node(cache) -> None:
    """With the Mamba extra buffer a finished request caches up to its last tracked
    checkpoint (cache_len); one that finished before reaching any had cache_len 0, and
    MambaRadixCache inserted the empty key anyway. The empty key ends on the root (key
    length 0), which has no state, so the insert gave it the request's tracked state: a
    ghost node. Every later match that finds no state deeper ends there (best value
    length 0) and copies that stale state into its request. PR #35821 returns early
    instead, as our ``_checkpoint`` does; the faulty copy of it goes on with the insert
    when cache_len is 0 for a finished request."""
    from ..basics.params import InsertParams, InsertResult

    tree = cache.tree
    mamba = cache.by_name["mamba"]
    checkpoint = cache._checkpoint

    def faulty_checkpoint(req, finished, up_to):
        if not finished:
            return checkpoint(req, finished, up_to)
        params = InsertParams(
            key=None, prev_prefix_len=req.cache_protected_len, priority=req.priority,
            swa_evicted_seqlen=req.swa_evicted_seqlen, inserted_len=req.cache_inserted_len,
        )
        cache_len = up_to
        for component in cache.components:  # idempotent for a finished request
            capped = component.prepare_for_caching_req(req, params, up_to, True)
            if capped is not None:
                cache_len = min(cache_len, capped)
        if cache_len > 0 or params.mamba_value is None:
            return checkpoint(req, finished, up_to)
        # the bug: no early return; the empty key's insert ends on the root
        fired(cache, GHOST_EMPTY_NODE)
        root = tree.root
        exists = root.data[mamba.index].value is not None
        if exists:  # "mamba value already exists": the ghost is refreshed, the new state freed
            tree.lru[mamba.name].promote(root)
        else:
            tree.set_component_value(root.id, mamba.name, params.mamba_value)
        root.last_access_time = tree.tick()
        result = InsertResult(prefix_len=0, last_device_node=root.id, mamba_exist=exists)
        for component in cache.components:
            component.cleanup_after_caching_req(req, True, result, params)

    cache._checkpoint = faulty_checkpoint


FAULTS: list[Fault] = [
    Fault(
        LOCK_SKIPS_MATCHED_NODE,
        "sgl-project/mini-sglang#52",
        ("full",),
        "the Full lock walk steps to the parent first: the matched node stays unlocked, the root gets a lock",
        _install_lock_skips_matched_node,
    ),
    Fault(
        SPLIT_EVICTABLE_DRIFT,
        "UbiquitousLearning/mllm#656",
        ("full",),
        "adding a leaf under a leaf takes the parent's tokens out of evictable (a split does not): evictable drifts",
        _install_split_evictable_drift,
    ),
    Fault(
        EVICTABLE_DOUBLE_COUNT,
        "sgl-project/sglang#35270",
        ("full",),
        "each release of a shared prefix returns it to evictable: available + evictable > total at idle",
        _install_evictable_double_count,
    ),
    Fault(
        RELEASE_DETACHED_LOCK,
        "sgl-project/sglang#29291",
        ("full",),
        "a release with a lock not held (twice, never taken, detached node) walks the node's parents instead of refusing",
        _install_release_detached_lock,
    ),
    Fault(
        PARTIAL_PAGE_EMPTY_NODE,
        "sgl-project/sglang#28692",
        ("mamba",),
        "a trailing partial page is looked up before the key is cut to pages: a child is split at 0 (an empty node)",
        _install_partial_page_empty_node,
    ),
    Fault(
        GHOST_EMPTY_NODE,
        "sgl-project/sglang#35821",
        ("mamba",),
        "a finished request with cache_len 0 still inserts its empty key: the root takes a stale Mamba state",
        _install_ghost_empty_node,
    ),
]
