"""Bad calls: each raises the right ``cache.basics.errors`` class with a clear message and
leaves the cache exactly as it was (snapshot equal, no invariant violated)."""

from __future__ import annotations

import contextlib

import pytest
import torch

from cache import (
    DecLockRefParams,
    EvictParams,
    InsertParams,
    MatchPrefixParams,
    RadixKey,
    UnifiedRadixCache,
    check_invariants,
)
from cache.basics.errors import (
    CacheError,
    DoubleFreeError,
    ForeignIndexError,
    InvalidKeyError,
    InvalidValueError,
    LockError,
    PoolError,
    PoolExhaustedError,
    UnknownNodeError,
)

from conftest import Checked, seq


@contextlib.contextmanager
def unchanged(cache, error: type[Exception], match: str | None = None):
    """The body must raise ``error`` (message matching ``match``) and change nothing."""
    before = cache.snapshot()
    with pytest.raises(error, match=match) as info:
        yield info
    after = cache.snapshot()
    assert after.nodes == before.nodes
    assert dict(after.pools) == dict(before.pools)
    assert dict(after.lru) == dict(before.lru)
    assert after.evictable_leaves == before.evictable_leaves
    assert after.requests == before.requests
    assert after == before
    assert check_invariants(cache) == []
    assert str(info.value)  # a message, not a bare class


def populated(full: Checked):
    """A small tree: a 2-page base with two 1-page branches; returns the node ids."""
    P = full.ps
    base = full.insert(seq(1, 2, P)).last_device_node
    a = full.insert(seq(1, 2, P) + seq(100, 1, P)).last_device_node
    b = full.insert(seq(1, 2, P) + seq(200, 1, P)).last_device_node
    return base, a, b


# ---- locks -----------------------------------------------------------------------------


def test_unlock_without_lock(full):
    cache = full.cache
    _, a, _ = populated(full)
    with unchanged(cache, LockError, "without a lock"):
        cache.dec_lock_ref(a, DecLockRefParams(node_id=a))
    with unchanged(cache, LockError, "not held"):
        cache.dec_lock_ref(a, DecLockRefParams(node_id=a, receipt_id=12345))


def test_unlock_with_a_receipt_id_forged_from_a_live_one(full):
    """A receipt number that is live but fabricated for another node is rejected."""
    cache = full.cache
    _, a, b = populated(full)
    receipt = full.lock(a)
    forged = DecLockRefParams(node_id=b, receipt_id=receipt.receipt_id)
    with unchanged(cache, LockError, "anchored on node"):
        cache.dec_lock_ref(b, forged)
    full.unlock(a, receipt)


def test_unlock_twice(full):
    cache = full.cache
    _, a, _ = populated(full)
    receipt = full.lock(a)
    full.unlock(a, receipt)
    with unchanged(cache, LockError, "released twice"):
        cache.dec_lock_ref(a, receipt)
    # a second, separate lock is unaffected by the failed replay
    r2 = full.lock(a)
    with unchanged(cache, LockError):
        cache.dec_lock_ref(a, receipt.to_dec_params())
    full.unlock(a, r2.to_dec_params())
    assert cache.full_protected_size() == 0


def test_unlock_on_another_node(full):
    cache, P = full.cache, full.ps
    base, a, b = populated(full)
    receipt = full.lock(a)
    for other in (b, base):
        with unchanged(cache, LockError, f"anchored on node {a}"):
            cache.dec_lock_ref(other, receipt)
    # the receipt still works where it was taken
    full.unlock(a, receipt)
    assert cache.full_protected_size() == 0
    assert cache.full_evictable_size() == 4 * P


def test_lock_unknown_node(full):
    cache = full.cache
    populated(full)
    with unchanged(cache, UnknownNodeError, "not in the tree"):
        cache.inc_lock_ref(10_000)


def test_lock_on_evicted_node(full):
    cache, P = full.cache, full.ps
    _, a, _ = populated(full)
    full.evict(4 * P)
    assert a not in cache.tree.nodes
    with unchanged(cache, UnknownNodeError):
        cache.inc_lock_ref(a)


# ---- insert values -------------------------------------------------------------------


def bad_insert(cache, tokens, value):
    return cache.insert(InsertParams(RadixKey(tokens), value))


def test_value_of_wrong_length(full):
    cache, P = full.cache, full.ps
    populated(full)
    tokens = seq(1, 2, P) + seq(300, 1, P)
    for n in (3 * P - 1, 3 * P + 1, 0):
        with unchanged(cache, InvalidValueError, "slots but the key has"):
            bad_insert(cache, tokens, torch.arange(n, dtype=torch.int64))


def test_value_of_wrong_dtype_or_shape(full):
    cache, P = full.cache, full.ps
    populated(full)
    tokens = seq(1, 2, P) + seq(300, 1, P)
    n = len(tokens)
    for value in (
        torch.arange(n, dtype=torch.int32),
        torch.arange(n, dtype=torch.float32),
        torch.arange(n, dtype=torch.int64).reshape(1, n),
        list(range(n)),
    ):
        with unchanged(cache, InvalidValueError, "1-D int64"):
            bad_insert(cache, tokens, value)
    with unchanged(cache, InvalidValueError, "needs a value"):
        bad_insert(cache, tokens, None)


def test_value_with_slot_ids_outside_the_pool(full):
    """Refused at the insert, not at a later eviction: the frees of an insert's slots
    (its duplicates at once, the rest when evicted) trust their range."""
    cache, P = full.cache, full.ps
    populated(full)
    tokens = seq(1, 2, P) + seq(300, 1, P)  # the first two pages are duplicates of the tree's
    size = cache.kv_pool.size
    for bad_slot in (-1, size, 2**40):
        for at in (0, len(tokens) - 1):  # in the duplicated part, and in the part a new leaf would keep
            value = torch.arange(len(tokens), dtype=torch.int64)
            value[at] = bad_slot
            with unchanged(cache, InvalidValueError, "outside the Full pool"):
                bad_insert(cache, tokens, value)


def test_negative_prev_prefix_len(full):
    cache, P = full.cache, full.ps
    populated(full)
    tokens = seq(1, 1, P)
    with unchanged(cache, CacheError, "prev_prefix_len"):
        cache.insert(InsertParams(RadixKey(tokens), torch.arange(P, dtype=torch.int64), prev_prefix_len=-1))


# ---- eviction amounts ------------------------------------------------------------------


@pytest.mark.parametrize("field", ["num_tokens", "swa_num_tokens", "mamba_num"])
@pytest.mark.parametrize("amount", [-1, -(10**9), 1.5, True, "3"])
def test_bad_eviction_amount(full, field, amount):
    cache = full.cache
    populated(full)
    for call in (cache.evict, cache.evict_for_alloc):
        with unchanged(cache, CacheError, f"{field} must be a non-negative int"):
            call(EvictParams(**{field: amount}))


# ---- allocation ------------------------------------------------------------------------


def test_alloc_beyond_pool_without_auto_evict(page_size):
    kv = 256 if page_size < 16 else 512
    full = Checked(page_size=page_size, kv_size=kv, auto_evict=False)
    cache, P = full.cache, full.ps
    populated(full)
    free = cache.available_size()
    assert free == kv - 4 * P
    with unchanged(cache, PoolExhaustedError, "exhausted"):
        cache.alloc_kv(free + 1)
    with unchanged(cache, PoolExhaustedError):
        cache.alloc_kv(kv)
    # the same request fits once the caller evicts explicitly
    full.evict(4 * P)
    slots = cache.alloc_kv(kv)
    assert slots.shape[0] == kv and cache.available_size() == 0
    cache.free_kv([slots])
    full.ok()


def test_alloc_beyond_pool_everything_locked(full):
    cache = full.cache
    _, a, b = populated(full)
    ra, rb = full.lock(a), full.lock(b)
    assert cache.full_evictable_size() == 0
    free = cache.available_size()
    with unchanged(cache, PoolExhaustedError, "exhausted"):
        cache.alloc_kv(free + 1)
    with unchanged(cache, PoolExhaustedError):
        cache.alloc_kv(cache.total_size())
    assert cache.snapshot().node(a).components["full"].lock_ref == 1
    full.unlock(a, ra)
    full.unlock(b, rb)


def test_new_request_beyond_pool_releases_its_lock(full):
    """No lock, slot or request leaks after a refused admission."""
    cache, P = full.cache, full.ps
    base, a, b = populated(full)
    ra, rb = full.lock(a), full.lock(b)
    free = cache.available_size()
    locks = {n.id: n.components["full"].lock_ref for n in cache.snapshot().nodes}
    with pytest.raises(PoolExhaustedError):
        cache.new_request(seq(1, 2, P) + seq(100, 1, P) + list(range(20000, 20000 + free + 1)))
    full.ok()
    assert {n.id: n.components["full"].lock_ref for n in cache.snapshot().nodes} == locks
    assert cache.available_size() == free and not cache.requests
    assert len(cache.tree.live_receipts) == 2
    full.unlock(a, ra)
    full.unlock(b, rb)


def test_new_request_beyond_pool_keeps_only_its_match(full):
    """The prefix ends inside the base node: as SGLang's scheduler matches before it
    admits, the refused request's match splits that node (checked against SGLang through
    the bridge); it holds nothing, and the pools are as they were."""
    cache, P = full.cache, full.ps
    _, a, b = populated(full)
    full.lock(a), full.lock(b)
    free = cache.available_size()
    before = cache.snapshot()
    with pytest.raises(PoolExhaustedError):
        cache.new_request(seq(1, 1, P) + list(range(20000, 20000 + free + 1)))
    after = cache.snapshot()
    assert (after.pools, after.requests) == (before.pools, before.requests)
    assert len(after.nodes) == len(before.nodes) + 1
    assert check_invariants(cache) == []


def test_negative_allocation_is_a_cache_error(full):
    cache = full.cache
    populated(full)
    with unchanged(cache, CacheError, "negative"):
        cache.alloc_kv(-1)


# ---- pool frees -----------------------------------------------------------------------


def test_double_free_across_calls(full):
    cache, P = full.cache, full.ps
    populated(full)
    slots = cache.alloc_kv(2 * P)
    cache.kv_pool.free(slots)
    full.ok()
    with unchanged(cache, DoubleFreeError, "double free"):
        cache.kv_pool.free(slots)
    with unchanged(cache, DoubleFreeError):
        cache.kv_pool.free(slots[P:])


def test_double_free_of_tree_slots_after_eviction(full):
    cache, P = full.cache, full.ps
    populated(full)
    tree_slots = full.match(seq(1, 2, P) + seq(100, 1, P)).device_indices.clone()
    full.evict(4 * P)
    with unchanged(cache, DoubleFreeError):
        cache.kv_pool.free(tree_slots)


def test_double_free_within_one_call(full):
    """A request's own pages plus a page that is already free: nothing is freed."""
    cache, P = full.cache, full.ps
    populated(full)
    req = cache.new_request(seq(5000, 2, P))
    own = req.own_indices
    gone = cache.alloc_kv(P)
    cache.kv_pool.free(gone)
    full.ok()
    with unchanged(cache, DoubleFreeError):
        cache.kv_pool.free(torch.cat([own, gone]))
    if P == 1:
        with unchanged(cache, DoubleFreeError):
            cache.kv_pool.free(torch.cat([own, own]))
    cache.release_kv_cache(req, checkpoint=False)
    full.ok()


def test_foreign_index(full):
    cache = full.cache
    populated(full)
    total = cache.total_size()
    for bad in (
        torch.tensor([total], dtype=torch.int64),
        torch.tensor([-1], dtype=torch.int64),
        torch.tensor([0, total + 5], dtype=torch.int64),
    ):
        with unchanged(cache, ForeignIndexError, "out of range"):
            cache.kv_pool.free(bad)
    for bad in (torch.tensor([0], dtype=torch.int32), torch.zeros((1, 1), dtype=torch.int64)):
        with unchanged(cache, ForeignIndexError, "1-D int64"):
            cache.kv_pool.free(bad)
    assert issubclass(ForeignIndexError, PoolError) and issubclass(PoolError, CacheError)


def test_foreign_index_through_a_peer_pool(page_size):
    """free_kv translates Full slots through SWA's table before the Full free: a
    foreign index must be refused before that lookup (a -1 would wrap to the last slot)."""
    hybrid = Checked(page_size=page_size, kv_size=256, components=("full", "swa"), sliding_window=8)
    populated(hybrid)
    cache = hybrid.cache
    for bad in (torch.tensor([-1], dtype=torch.int64), torch.tensor([0, cache.total_size()], dtype=torch.int64)):
        with unchanged(cache, ForeignIndexError, "out of range"):
            cache.free_kv([bad])
    with unchanged(cache, ForeignIndexError, "1-D int64"):
        cache.free_kv([torch.tensor([0], dtype=torch.int32)])


# ---- token ids --------------------------------------------------------------------------


BAD_TOKENS = [
    pytest.param([1, -1, 2], id="negative"),
    pytest.param([-(2**31)], id="int32-min"),
    pytest.param([1, 2**31], id="2**31"),
    pytest.param([2**40], id="huge"),
    pytest.param([1, 1.5], id="float"),
    pytest.param([1, "2"], id="str-item"),
    pytest.param([None], id="none"),
    pytest.param("abc", id="string"),
    pytest.param(b"\x01\x00\x00\x00", id="bytes"),
]


@pytest.mark.parametrize("tokens", BAD_TOKENS)
def test_radix_key_rejects_bad_token_ids(tokens):
    with pytest.raises(InvalidKeyError, match="token ids"):
        RadixKey(tokens)


def test_radix_key_accepts_edge_token_ids():
    assert RadixKey([0, 2**31 - 1]).token_ids == [0, 2**31 - 1]
    assert RadixKey([]).token_ids == []


@pytest.mark.parametrize("tokens", BAD_TOKENS)
def test_bad_token_ids_leave_cache_intact(full, tokens):
    cache = full.cache
    populated(full)
    with unchanged(cache, InvalidKeyError):
        cache.match_prefix(tokens)
    with unchanged(cache, InvalidKeyError):
        cache.new_request(tokens)
    with unchanged(cache, InvalidKeyError):
        cache.insert(InsertParams(tokens, torch.arange(8, dtype=torch.int64)))


def test_bad_extend_tokens_leave_request_intact(full):
    cache, P = full.cache, full.ps
    populated(full)
    req = cache.new_request(seq(1, 2, P) + seq(100, 1, P) + [7])
    kv = req.kv_indices.clone()
    with unchanged(cache, InvalidKeyError):
        cache.extend_request(req, [1, -5])
    assert torch.equal(req.kv_indices, kv) and req.output_ids == []
    cache.release_kv_cache(req)
    full.ok()


def test_bad_extra_key(full):
    cache = full.cache
    populated(full)
    with unchanged(cache, InvalidKeyError, "extra_key"):
        cache.match_prefix(MatchPrefixParams(RadixKey([1, 2], extra_key=3)))


# ---- request lifecycle -------------------------------------------------------------------


def test_finish_twice_and_duplicate_rid(full):
    cache, P = full.cache, full.ps
    populated(full)
    req = cache.new_request(seq(1, 3, P), rid="r")
    with unchanged(cache, CacheError, "already running"):
        cache.new_request(seq(9, 1, P), rid="r")
    cache.release_kv_cache(req)
    full.ok()
    for call in (cache.release_kv_cache, cache.checkpoint):
        with unchanged(cache, CacheError, "not running"):
            call(req)
    with unchanged(cache, CacheError, "not running"):
        cache.extend_request(req, [1])


def test_unknown_node_path(full):
    cache = full.cache
    populated(full)
    with unchanged(cache, UnknownNodeError):
        cache.path_device_indices(999)


def test_cache_with_auto_evict_off_is_configurable():
    cache = UnifiedRadixCache(page_size=4, kv_size=64, auto_evict=False, device="cpu")
    assert cache.auto_evict is False and cache.available_size() == 64
