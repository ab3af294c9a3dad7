"""The session radix cache against what SGLang 0.5.23 answers (the oracle's
examples-ext/session_*_p1 sequences, replayed through the cache API)."""

from __future__ import annotations

import pytest

from cache.controller.unified_radix_cache import UnifiedRadixCache
from cache.observe.events import Cause, EventKind
from cache.checks.invariants import check_invariants
from cache.basics.params import EvictParams


def full_cache(on: bool = True) -> UnifiedRadixCache:
    return UnifiedRadixCache(components=("full",), page_size=1, kv_size=64, session_radix_cache=on)


def hybrid_cache(on: bool) -> UnifiedRadixCache:
    return UnifiedRadixCache(components=("full", "swa", "mamba"), page_size=1, kv_size=64, sliding_window=4,
                             mamba_size=8, session_radix_cache=on)


def run(cache, tokens, out=(), session=None, generation=None, abort=False):
    req = cache.new_request(tokens, session_id=session, session_generation=generation)
    if out:
        cache.extend_request(req, list(out))
    if abort:
        cache.abort(req)
    else:
        cache.release_kv_cache(req)
    return req


def by_key(cache) -> dict[tuple, tuple]:
    """key -> per component (session_ref, sorted session ids), every non-root node."""
    snap = cache.snapshot()
    return {n.key: tuple((c.session_ref, c.session_ids) for c in n.components.values()) for n in snap.non_root()}


def node_of(cache, key) -> int:
    return next(n.id for n in cache.snapshot().non_root() if n.key == tuple(key))


def test_full_eviction_takes_unreferenced_leaves_first_then_fewer_refs():
    """examples-ext/session_evict_full_p1."""
    c = full_cache()
    assert c.open_radix_session("s1") == 1
    run(c, [1, 2, 3, 4, 5, 6], [7, 8], session="s1")
    run(c, [20, 21, 22, 23, 24, 25], [26, 27])
    # the prompt split happened before registering: the prompt node is covered too
    assert by_key(c) == {(1, 2, 3, 4, 5, 6): ((1, ()),), (7, 8): ((1, ("s1",)),),
                         (20, 21, 22, 23, 24, 25): ((0, ()),), (26, 27): ((0, ()),)}
    # a's leaf is older, but b's output and then b's prompt go first
    assert c.evict(EvictParams(num_tokens=2)).num_tokens_evicted == 2
    assert c.evict(EvictParams(num_tokens=2)).num_tokens_evicted == 6
    assert {n.key for n in c.snapshot().non_root()} == {(1, 2, 3, 4, 5, 6), (7, 8)}
    assert c.open_radix_session("s2") == 2
    run(c, [1, 2, 3, 4, 5, 6, 9, 9], session="s2")
    assert by_key(c)[(1, 2, 3, 4, 5, 6)] == ((2, ()),)
    # both leaves referenced once: the older one (s1's) goes; s1 recedes to the prompt
    assert c.evict(EvictParams(num_tokens=2)).num_tokens_evicted == 2
    assert by_key(c) == {(1, 2, 3, 4, 5, 6): ((2, ("s1",)),), (9, 9): ((1, ("s2",)),)}
    prompt = node_of(c, [1, 2, 3, 4, 5, 6])
    assert c.snapshot().sessions.leaves == {"s1": {"full": (prompt,)}, "s2": {"full": (node_of(c, [9, 9]),)}}
    assert c.release_radix_session("s2") == 0
    assert c.session_refs.last_released == {"full": 1}
    assert by_key(c) == {(1, 2, 3, 4, 5, 6): ((1, ("s1",)),), (9, 9): ((0, ()),)}
    assert c.evict(EvictParams(num_tokens=2)).num_tokens_evicted == 2
    c.release_radix_session("s1")
    assert c.evict(EvictParams(num_tokens=1000)).num_tokens_evicted == 6
    sessions = c.snapshot().sessions
    assert (dict(sessions.generations), sessions.incarnation_counter, sessions.closed, dict(sessions.leaves)) == (
        {}, 2, ("s2", "s1"), {})
    assert check_invariants(c) == []


def test_lifecycle_generations_tombstones_stale_and_aborted_requests():
    """examples-ext/session_lifecycle_full_p1 (the controller's refusal of a second open
    is the session controller's, not the tracker's)."""
    c = full_cache()
    assert c.open_radix_session("s1") == 1
    a = c.new_request([1, 2, 3, 4], session_id="s1")
    assert a.session_generation == 1
    c.release_radix_session("s1")
    assert c.session_refs.last_released == {"full": 0}
    c.release_kv_cache(a)  # finished after the close: nothing registered
    assert c.snapshot().sessions.leaves == {}
    b = c.new_request([1, 2, 3, 4, 5], session_id="s1")  # reopens: generation 2
    assert b.session_generation == 2 and list(c.session_refs.closed) == []
    run(c, [1, 2, 3, 4, 6], session="s1", generation=1)  # stale: skipped
    c.release_kv_cache(b)
    assert by_key(c) == {(1, 2, 3, 4): ((1, ()),), (5,): ((1, ("s1",)),), (6,): ((0, ()),)}
    run(c, [30, 31, 32], session="s1", abort=True)  # FINISH_ABORT: cached, never tagged
    assert by_key(c)[(30, 31, 32)] == ((0, ()),)
    e = run(c, [40, 41, 42], session="s3")
    assert e.session_generation == 3
    assert c.open_radix_session("s1") == 4  # an explicit reopen: a new generation, same tags
    assert c.release_radix_session("s1") == 0  # registered under generation 2, dropped anyway
    assert c.session_refs.last_released == {"full": 1}
    c.release_radix_session("s3")
    assert c.session_refs.last_released == {"full": 1}
    c.release_radix_session("s3")  # already closed
    assert c.session_refs.last_released == {}
    assert all(refs == ((0, ()),) for refs in by_key(c).values())
    sessions = c.snapshot().sessions
    assert (dict(sessions.generations), sessions.incarnation_counter, sessions.closed) == ({}, 4, ("s1", "s3"))
    assert check_invariants(c) == []


def test_hybrid_coverage_partitions_and_walks():
    """examples-ext/session_evict_full_swa_mamba_p1: Full covers the path, SWA the last
    window plus a page, Mamba the leaf; referenced nodes sit on the MRU side."""
    c = hybrid_cache(True)
    c.open_radix_session("s1")
    run(c, [1, 2, 3, 4, 5, 6, 7, 8], [9, 10], session="s1")
    run(c, [20, 21, 22, 23, 24, 25, 26, 27], [28, 29])
    refs = by_key(c)
    assert refs[(1, 2, 3, 4, 5, 6)] == ((1, ()), (1, ()), (0, ()))
    assert refs[(7, 8, 9, 10)] == ((1, ("s1",)), (1, ("s1",)), (1, ("s1",)))
    assert refs[(20, 21, 22, 23, 24, 25)] == refs[(26, 27, 28, 29)] == ((0, ()), (0, ()), (0, ()))
    ids = [node_of(c, k) for k in ([1, 2, 3, 4, 5, 6], [7, 8, 9, 10], [20, 21, 22, 23, 24, 25], [26, 27, 28, 29])]
    a_prompt, a_out, b_prompt, b_out = ids
    lru = c.snapshot().lru
    assert lru["swa"] == (a_prompt, a_out, b_out, b_prompt)
    assert lru["mamba"] == (a_out, b_out)
    assert c.tree.lru["swa"].referenced_count() == 2 and c.tree.lru["mamba"].referenced_count() == 1
    r = c.evict(EvictParams(mamba_num=1))
    assert r.by_component == {"full": 4, "swa": 4, "mamba": 1}  # b's leaf, whole
    r = c.evict(EvictParams(swa_num_tokens=4))
    assert r.by_component == {"full": 6, "swa": 6, "mamba": 0}  # b's prompt, now a leaf
    assert check_invariants(c) == []
    c.release_radix_session("s1")
    assert c.session_refs.last_released == {"full": 1, "swa": 1, "mamba": 1}
    assert all(v == ((0, ()),) * 3 for v in by_key(c).values())
    assert c.tree.lru["swa"].referenced_count() == 0
    r = c.evict(EvictParams(num_tokens=1000, swa_num_tokens=1000, mamba_num=1000))
    assert r.by_component == {"full": 10, "swa": 10, "mamba": 1}
    assert check_invariants(c) == []


def test_refs_off_changes_nothing():
    """examples-ext/session_off_full_swa_mamba_p1: the same ops with refs off."""
    c = hybrid_cache(False)
    run(c, [1, 2, 3, 4, 5, 6, 7, 8], [9, 10], session="s1")
    run(c, [20, 21, 22, 23, 24, 25, 26, 27], [28, 29])
    assert all(v == ((0, ()),) * 3 for v in by_key(c).values())
    assert c.snapshot().sessions is None and c.session_refs.generations == {}
    ids = [node_of(c, k) for k in ([1, 2, 3, 4, 5, 6], [7, 8, 9, 10], [20, 21, 22, 23, 24, 25], [26, 27, 28, 29])]
    a_prompt, a_out, b_prompt, b_out = ids
    assert c.snapshot().lru["swa"] == (b_out, b_prompt, a_out, a_prompt)
    assert c.evict(EvictParams(mamba_num=1)).by_component == {"full": 4, "swa": 4, "mamba": 1}  # a's leaf
    assert c.evict(EvictParams(swa_num_tokens=4)).by_component == {"full": 6, "swa": 6, "mamba": 0}
    assert {n.key for n in c.snapshot().non_root()} == {(20, 21, 22, 23, 24, 25), (26, 27, 28, 29)}
    assert c.release_radix_session("s1") == 0 and c.session_refs.last_released == {}


def test_events_show_ref_changes_with_their_cause():
    c = full_cache()
    seen = []
    c.events.subscribe(seen.append)
    c.open_radix_session("s1")
    run(c, [1, 2, 3], session="s1")
    c.release_radix_session("s1")
    kinds = [(e.kind, e.cause, e.op) for e in seen if e.kind in (EventKind.SESSION_REF, EventKind.SESSION_LEAF)]
    assert (EventKind.SESSION_REF, Cause.SESSION, "release_kv_cache") in kinds
    assert (EventKind.SESSION_LEAF, Cause.SESSION, "release_kv_cache") in kinds
    assert (EventKind.SESSION_REF, Cause.SESSION_CLOSE, "release_radix_session") in kinds
    assert (EventKind.SESSION_LEAF, Cause.SESSION_CLOSE, "release_radix_session") in kinds


@pytest.mark.parametrize("field, delta, name", [
    ("session_ref", 1, "session.ref_balance"),
    ("session_ref", -5, "session.ref_negative"),
    ("session_ids", None, "session.marker"),
])
def test_invariants_catch_a_corrupted_session_state(field, delta, name):
    c = hybrid_cache(True)
    c.open_radix_session("s1")
    run(c, [1, 2, 3, 4, 5, 6, 7, 8], [9, 10], session="s1")
    assert check_invariants(c) == []
    leaf = c.tree.nodes[node_of(c, [7, 8, 9, 10])]
    c.tree.take_touched()
    if field == "session_ref":
        leaf.data[1].session_ref += delta
    else:
        leaf.data[2].session_ids = {"ghost"}
    assert name in {v.name for v in check_invariants(c)}
    assert name in {v.name for v in check_invariants(c, touched={leaf.id})}  # the per-step probe sees it too


def test_split_inheritance_and_unreferenced_leaf_first():
    """A split's new parent copies Full's and SWA's session_ref (Mamba's starts at 0,
    the marker stays below); SWA's walk then takes the unreferenced branch whole.
    Checked against the oracle on the same sequence."""
    c = hybrid_cache(True)
    c.open_radix_session("s1")
    run(c, [1, 2, 3, 4, 5, 6, 7, 8], [9, 10], session="s1")
    run(c, [1, 2, 3, 4, 5, 6, 7, 11, 12])
    refs = by_key(c)
    assert refs[(7,)] == ((1, ()), (1, ()), (0, ()))
    assert refs[(8, 9, 10)] == ((1, ("s1",)), (1, ("s1",)), (1, ("s1",)))
    assert refs[(11, 12)] == ((0, ()), (0, ()), (0, ()))
    assert c.tree.lru["swa"].referenced_count() == 3
    assert c.evict(EvictParams(swa_num_tokens=1)).by_component == {"full": 2, "swa": 2, "mamba": 1}
    assert (11, 12) not in by_key(c)
    assert check_invariants(c) == []
