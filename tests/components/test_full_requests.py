"""Request flows on a Full-only cache (admission, chunked prefill, finishing) at page
sizes 1, 4 and 16, checked after every step like the other Full cases."""

from __future__ import annotations

import pytest
import torch


from cache.basics.errors import LockError

from conftest import assert_empty_tree, lock_ref, matched, seq, stray


# ---- request flows -----------------------------------------------------------------


def test_chunked_prefill_lock_transfer(full):
    cache, P = full.cache, full.ps
    total = cache.total_size()
    base = seq(1, 1, P)
    base_id = full.insert(base).last_device_node
    extra = P // 2  # an unaligned tail at ps > 1
    tokens = seq(1, 3, P) + stray(extra)
    req = cache.new_request(tokens)
    full.ok()
    assert req.cache_protected_len == P and req.last_node == base_id
    assert lock_ref(cache, base_id) == 1
    own_pages = -(-(2 * P + extra) // P)
    assert cache.available_size() == total - P - own_pages * P
    old_receipt = req.lock

    cache.checkpoint(req)
    full.ok()
    assert req.cache_protected_len == 3 * P
    new_node = req.last_node
    assert new_node != base_id
    snap = cache.snapshot()
    assert snap.node(new_node).path == tuple(seq(1, 3, P))
    assert snap.node(new_node).components["full"].lock_ref == 1
    # the old lock is gone: base is held only through the new path lock
    assert snap.node(base_id).components["full"].lock_ref == 1
    assert cache.full_protected_size() == 3 * P
    with pytest.raises(LockError):
        cache.dec_lock_ref(base_id, old_receipt)
    # nothing was freed: the request's slots became the tree's
    assert cache.available_size() == total - P - own_pages * P
    assert torch.equal(req.kv_indices[: 3 * P], cache.path_device_indices(new_node))
    assert snap.pools["full"].held == (P if extra else 0)

    # decode a page, checkpoint again: the lock moves on once more
    cache.extend_request(req, stray(P, 20000))
    cache.checkpoint(req)
    full.ok()
    aligned = (3 * P + extra + P) // P * P
    assert req.cache_protected_len == aligned
    assert req.last_node != new_node
    assert lock_ref(cache, new_node) == 1 and lock_ref(cache, req.last_node) == 1
    assert cache.full_protected_size() == aligned

    cache.release_kv_cache(req)
    full.ok()
    assert cache.full_protected_size() == 0
    assert not cache.requests
    assert all(n.components["full"].lock_ref == 0 for n in cache.snapshot().non_root())
    assert cache.available_size() + cache.full_evictable_size() == total
    full.evict(total)
    assert_empty_tree(full)


def test_checkpoint_on_empty_tree(full):
    cache, P = full.cache, full.ps
    req = cache.new_request(seq(1, 3, P))
    assert req.last_node == cache.tree.root.id and req.cache_protected_len == 0
    cache.checkpoint(req)
    full.ok()
    assert req.cache_protected_len == 3 * P
    assert lock_ref(cache, req.last_node) == 1
    assert torch.equal(req.prefix_indices, full.match(seq(1, 3, P)).device_indices)
    cache.release_kv_cache(req)
    full.ok()
    assert cache.full_protected_size() == 0
    assert cache.available_size() == cache.total_size() - 3 * P


def test_release_kv_cache_insert(full):
    cache, P = full.cache, full.ps
    prompt, output = seq(1, 3, P), seq(2000, 1, P)
    req = cache.new_request(prompt)
    cache.extend_request(req, output)
    assert req.kv_len == 4 * P
    cache.release_kv_cache(req)
    full.ok()
    assert matched(full, prompt + output) == 4 * P
    assert cache.available_size() == cache.total_size() - 4 * P
    assert cache.full_protected_size() == 0 and not cache.requests


def test_release_kv_cache_no_insert(full):
    cache, P = full.cache, full.ps
    req = cache.new_request(seq(1, 2, P))
    full.ok()
    before = cache.available_size()
    cache.release_kv_cache(req, checkpoint=False)
    full.ok()
    assert cache.available_size() == before + 2 * P == cache.total_size()
    assert matched(full, seq(1, 2, P)) == 0
    assert_empty_tree(full)


def test_release_kv_cache_no_insert_keeps_tree_prefix(full):
    cache, P = full.cache, full.ps
    base_id = full.insert(seq(1, 1, P)).last_device_node
    req = cache.new_request(seq(1, 3, P))
    full.ok()
    assert req.cache_protected_len == P and lock_ref(cache, base_id) == 1
    before = cache.available_size()
    cache.release_kv_cache(req, checkpoint=False)
    full.ok()
    # only the request's own 2 pages go back; the tree keeps the prefix
    assert cache.available_size() == before + 2 * P
    assert lock_ref(cache, base_id) == 0
    assert matched(full, seq(1, 3, P)) == P


def test_paged_cache_finished_unaligned_tail_freed(full):
    cache, P = full.cache, full.ps
    if P == 1:
        pytest.skip("ps 1 has no unaligned tail")
    tokens = seq(1, 1, P) + stray(P // 2)
    req = cache.new_request(tokens)
    full.ok()
    # 1.5 pages need 2 whole pages from the page-granular allocator
    assert cache.available_size() == cache.total_size() - 2 * P
    before = cache.available_size()
    cache.release_kv_cache(req)
    full.ok()
    # the tail's ps/2 slots sit on a page of their own: freeing them returns that page
    assert cache.available_size() == before + P
    assert matched(full, tokens) == P
    assert cache.full_evictable_size() == P


def test_release_kv_cache_splits_at_prompt_boundary(full):
    cache, P = full.cache, full.ps
    prompt, output = seq(1, 2, P), seq(700, 1, P)
    req = cache.new_request(prompt)
    cache.extend_request(req, output)
    cache.release_kv_cache(req)
    full.ok()
    snap = cache.snapshot()
    (prompt_node,) = snap.root.children
    assert snap.node(prompt_node).key == tuple(prompt)
    (out_node,) = snap.node(prompt_node).children
    assert snap.node(out_node).key == tuple(output)
    assert snap.node(out_node).children == ()
    # the output can now be evicted on its own
    assert full.evict(P).num_tokens_evicted == P
    assert matched(full, prompt + output) == 2 * P


def test_prompt_boundary_split_with_unaligned_prompt(full):
    cache, P = full.cache, full.ps
    if P == 1:
        pytest.skip("needs a prompt with a partial last page")
    h = P // 2
    prompt = seq(1, 2, P) + stray(h)
    output = stray(P, 30000)
    req = cache.new_request(prompt)
    cache.extend_request(req, output)
    full.ok()
    assert req.kv_len == 3 * P + h
    cache.release_kv_cache(req)
    full.ok()
    snap = cache.snapshot()
    (prompt_node,) = snap.root.children
    assert snap.node(prompt_node).key == tuple(prompt[: 2 * P])
    (out_node,) = snap.node(prompt_node).children
    assert snap.node(out_node).key == tuple((prompt + output)[2 * P : 3 * P])
    # 3 pages cached, the 4th (holding the last h tokens) went back
    assert cache.available_size() == cache.total_size() - 3 * P
    assert matched(full, prompt + output) == 3 * P


def test_prompt_only_request_is_not_split(full):
    cache, P = full.cache, full.ps
    req = cache.new_request(seq(1, 3, P))
    cache.release_kv_cache(req)
    full.ok()
    snap = cache.snapshot()
    assert [n.tokens for n in snap.non_root()] == [3 * P]


def test_two_requests_share_prefix(full):
    cache, P = full.cache, full.ps
    total = cache.total_size()
    r1 = cache.new_request(seq(1, 2, P))
    cache.release_kv_cache(r1)
    r2 = cache.new_request(seq(1, 2, P) + seq(400, 1, P))
    full.ok()
    assert r2.cache_protected_len == 2 * P
    assert cache.available_size() == total - 3 * P
    r3 = cache.new_request(seq(1, 2, P) + seq(800, 1, P))
    full.ok()
    assert lock_ref(cache, r2.last_node) == 2
    cache.release_kv_cache(r2)
    cache.release_kv_cache(r3)
    full.ok()
    assert cache.available_size() == total - 4 * P
    assert matched(full, seq(1, 2, P) + seq(400, 1, P)) == 3 * P
    assert matched(full, seq(1, 2, P) + seq(800, 1, P)) == 3 * P
