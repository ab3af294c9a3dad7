"""Faults in the mamba component's behaviour (see the package docstring for the rules).

Each installer patches one cache instance (its Mamba component, its tree's hook
lists, or the controller instance) with faulty copies; nothing here imports torch
or a cache module at import time.
"""

from __future__ import annotations

import functools
import types

from . import Fault, fired

# ---- sgl-project/sglang#12007: the Mamba LRU is not refreshed on match / insert ----------

LRU_NOT_REFRESHED = "mamba-lru-not-refreshed"


def _install_lru_not_refreshed(cache) -> None:
    """A match that ends on a state, and an insert that finds a state already there,
    leave that state where it was in the Mamba LRU instead of moving it to the MRU end.
    Fires only when the state was not at the MRU end already (else the order agrees)."""
    mamba, tree = cache.by_name["mamba"], cache.tree
    i = mamba.index
    correct_match_end = mamba.on_match_end
    correct_commit = mamba.commit_insert

    def is_mru(node) -> bool:
        lst = tree.lru[mamba.name]  # the tree's reset() builds new lists
        return lst.head.lru_next[lst.slot] is node

    def on_match_end(self, node) -> None:
        if node.data[i].value is not None and not is_mru(node):
            fired(cache, LRU_NOT_REFRESHED)  # upstream: the matched state keeps its old place
            return
        correct_match_end(node)

    def commit_insert(self, node, is_new_leaf, params, result, actions) -> None:
        if node is not self.tree.root and node.data[i].value is not None and not is_mru(node):
            fired(cache, LRU_NOT_REFRESHED)  # the state found by the insert is not refreshed
            node.last_access_time = self.tree.tick()
            result.mamba_exist = True
            return
        correct_commit(node, is_new_leaf, params, result, actions)

    mamba.on_match_end = types.MethodType(on_match_end, mamba)
    mamba.commit_insert = types.MethodType(commit_insert, mamba)
    # the tree core captured the bound hook at construction: swap it in its list too
    tree._match_end_hooks = [
        mamba.on_match_end if getattr(h, "__self__", None) is mamba else h for h in tree._match_end_hooks
    ]


# ---- sgl-project/sglang#16067: the COW slot of a refused admission leaks ------------------

COW_LEAK = "mamba-cow-leak-on-failed-admission"


def _install_cow_leak(cache) -> None:
    """Upstream's scheduler matched (copy-on-write: a Mamba slot for the request, the
    matched state copied in) before it knew the request could be admitted; when
    add_one_req then refused it, nothing returned that slot. Here a refused
    new_request's match keeps the slot. Fires when a slot leaks that way."""
    from ..basics.errors import PoolExhaustedError, StateSlotsAssertError
    from ..basics.params import MatchPrefixParams

    def match_refused(req, key) -> None:
        try:
            cache.match_prefix(MatchPrefixParams(key, cow_mamba=True, req=req))
        except StateSlotsAssertError:
            raise  # the copy's own assert, as in the correct code
        except PoolExhaustedError:
            return  # no slot for the copy: nothing to leak (the correct code says the same)
        if req.mamba_pool_idx is not None:
            fired(cache, COW_LEAK)  # the request goes back to the queue still owning the slot

    cache._match_refused = match_refused


# ---- sgl-project/sglang#21379: Mamba eviction deletes a childless node whose Full is locked

EVICT_LOCKED_LEAF = "mamba-evict-locked-leaf"


def _install_evict_locked_leaf(cache) -> None:
    """The old evict_mamba took any childless node as a leaf to delete whole (Full KV
    included), even when an in-flight request held a lock on its Full KV; the correct
    code only tombstones the state of a node that is not an evictable leaf. Fires
    each time such a locked childless node is deleted."""
    mamba, tree = cache.by_name["mamba"], cache.tree
    correct = mamba.evict_next

    def evict_next(self, batch):  # LRUEvictionMixin.evict_next's plain walk, but for one test
        if self._session_walk:  # the session cursor's walk predates the bug: left as it is
            return correct(batch)
        lru = tree.lru[self.name]
        if self._cursor is not None and self._cursor not in lru:
            self._cursor = lru.lru_first()
        x = self._cursor
        if batch.counts[self.name] >= self._evict_request or x is None:
            return None, False
        self._cursor = lru.prev_of(x)
        if x.in_leaf_set:
            return x, True
        if not x.children:  # upstream: "no children" meant "a leaf", locked or not
            fired(cache, EVICT_LOCKED_LEAF)
            tree.leaves.add(x)  # past delete_leaf's check: deleted whole, Full lock and all
            return x, True
        tree.tombstone(x, self, batch)
        return None, True

    mamba.evict_next = types.MethodType(evict_next, mamba)


# ---- sgl-project/sglang#27147: a lock on a tombstone skips Mamba; the release does not ----

UNLOCK_AFTER_REVIVE = "mamba-unlock-after-revive"


def _install_unlock_after_revive(cache) -> None:
    """The old inc_lock_ref locked a node's Mamba state only if it had one (a
    tombstone got the Full lock only), and dec_lock_ref decided by looking at the node
    at release time, with no check: a state revived in between is released without
    ever having been locked (its lock_ref goes below zero, protected/evictable drift),
    and a lock taken on a state that is then gone is never released. The correct code
    counts the Mamba lock on a tombstone too, so lock and release are symmetric.
    Fires on each lock or release whose Mamba part differs from the correct one."""
    mamba = cache.by_name["mamba"]
    i = mamba.index
    correct_acquire = mamba.acquire_lock
    correct_check = mamba.check_release
    correct_release = mamba.release_lock

    def acquire_lock(self, node, receipt) -> None:
        if node is not self.tree.root and node.data[i].value is None:
            fired(cache, UNLOCK_AFTER_REVIVE)  # a tombstone: the Mamba lock is not counted
            return
        correct_acquire(node, receipt)

    def check_release(self, node, receipt):
        problem = correct_check(node, receipt)
        if problem is not None:
            fired(cache, UNLOCK_AFTER_REVIVE)  # upstream released without checking
        return None

    def release_lock(self, node, receipt) -> None:
        if node is not self.tree.root and node.data[i].value is None:
            fired(cache, UNLOCK_AFTER_REVIVE)  # no state now: the Mamba lock is left as it is
            return
        correct_release(node, receipt)  # a state now: the Mamba branch, taken or not

    mamba.acquire_lock = types.MethodType(acquire_lock, mamba)
    mamba.check_release = types.MethodType(check_release, mamba)
    mamba.release_lock = types.MethodType(release_lock, mamba)


# ---- sgl-project/sglang#36770: "Can not alloc mamba cache" asserts ----------------------

ALLOC_ASSERTS = "mamba-alloc-asserts-when-all-locked"


@functools.cache
def _alloc_assert_error() -> type:
    """The upstream AssertionError, also a CacheError so a run records the step (the
    correct code refuses cleanly with PoolExhaustedError "cannot alloc mamba cache")."""
    from ..basics.errors import CacheError

    class MambaAllocAssertionError(CacheError, AssertionError):
        """An assert in the scheduler's allocation path: upstream, the process dies."""

    return MambaAllocAssertionError


def _install_alloc_asserts(cache) -> None:
    """When the pool has no free slot and evict_for_alloc(mamba_num=1) frees none
    (every state locked or held by a running request), _alloc_mamba_slot asserted
    instead of refusing the allocation. Fires each time the assert is hit."""
    from ..basics.errors import PoolExhaustedError

    mamba = cache.by_name["mamba"]
    correct_alloc = mamba.alloc_slot

    def alloc_slot(self):
        try:
            return correct_alloc()
        except PoolExhaustedError:
            fired(cache, ALLOC_ASSERTS)
            raise _alloc_assert_error()("Can not alloc mamba cache") from None

    mamba.alloc_slot = types.MethodType(alloc_slot, mamba)


# ---- sgl-project/sglang#30986: a called-off load-back keeps the request's Mamba slot ------

LOAD_BACK_SLOT_KEPT = "mamba-load-back-slot-kept"


def _install_load_back_slot_kept(cache) -> None:
    """Before the fix, building a load-back's Mamba transfer gave the request its own
    state slot before the load was known to go through; when it was called off
    (mem_quota, no room, or the controller's load failing) nothing took the slot
    back: the request kept it and ran its prefill from whatever the slot held, its
    copy never having run. Fires each time a called-off load leaves the slot on the
    request (a key-only load has none to leave it on: the request it stands for is
    dropped, giving back what it holds)."""
    mamba = cache.by_name["mamba"]
    correct_finalize = mamba.finalize_load_back

    def finalize_load_back(self, req, prep, success: bool) -> None:
        if not success and prep is not None and req is not None:
            fired(cache, LOAD_BACK_SLOT_KEPT)  # upstream: the slot stays on req.mamba_pool_idx
            return
        correct_finalize(req, prep, success)

    mamba.finalize_load_back = types.MethodType(finalize_load_back, mamba)


FAULTS: list[Fault] = [
    Fault(
        LRU_NOT_REFRESHED, "sgl-project/sglang#12007", ("mamba",),
        "a match or insert that uses a cached Mamba state does not move it to the MRU end of the Mamba LRU",
        _install_lru_not_refreshed,
    ),
    Fault(
        COW_LEAK, "sgl-project/sglang#16067", ("mamba",),
        "a refused admission keeps the copy-on-write Mamba slot its match took (leaked)",
        _install_cow_leak,
    ),
    Fault(
        EVICT_LOCKED_LEAF, "sgl-project/sglang#21379", ("mamba",),
        "Mamba eviction deletes a childless node whole although its Full KV is locked",
        _install_evict_locked_leaf,
    ),
    Fault(
        UNLOCK_AFTER_REVIVE, "sgl-project/sglang#27147", ("mamba",),
        "a lock on a Mamba tombstone skips the Mamba lock; the release decides by the node's state at release time",
        _install_unlock_after_revive,
    ),
    Fault(
        ALLOC_ASSERTS, "sgl-project/sglang#36770", ("mamba",),
        "a Mamba slot allocation that eviction cannot cover asserts instead of being refused cleanly",
        _install_alloc_asserts,
    ),
    Fault(
        LOAD_BACK_SLOT_KEPT, "sgl-project/sglang#30986", ("mamba",),
        "a called-off load-back leaves the Mamba slot it gave the request on it: the prefill starts from a stale state",
        _install_load_back_slot_kept, host_tier=True,
    ),
]
