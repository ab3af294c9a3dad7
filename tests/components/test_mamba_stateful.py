"""Hypothesis stateful test for the Mamba component: random op sequences, invariants
after every step, for FULL+MAMBA at page 1 and page 4 (extra buffer, checkpoints every
64 tokens) and FULL+SWA+MAMBA at page 1, window 4.

Keys are pages drawn from a tiny alphabet over a few shared stems, so sequences share
prefixes, split nodes (leaving stateless parents) and fight over small pools: the
state pool holds only a few requests' worth of slots, so inserts, copy-on-write
matches and admissions evict states (and the leaves that hold them) or are refused.
Every match is checked against the oracle of ``mamba_util`` (deepest whole node with
a state and, with SWA, a live window), and every refused admission must leave the
cache exactly as it was (PR #36770).

Two shapes that once broke the cache are counted as events so a run shows they were
exercised: a request whose protected prefix lies past its tracked checkpoint (page >
1), and a prompt that diverges inside a node holding a state (the admission check
must not be fooled into a refusal that comes after a split).
"""

from __future__ import annotations

import os

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis.stateful import invariant, precondition, rule

from cache import CacheError, EvictParams, InsertParams, RadixKey, UnifiedRadixCache, verify_match
from cache.basics.errors import LockError, PoolExhaustedError, ReferenceAssertsError

from conftest import walk
from mamba_util import expected_match, fp, grid_of
from stateful_util import CacheMachineBase, page_tokens


class MambaCacheMachine(CacheMachineBase):
    page_size = 1
    window = None
    kv_size = 64
    swa_kv_size = None
    mamba_size = 6
    max_pages = 10

    def __init__(self) -> None:
        super().__init__()
        components = ("full", "swa", "mamba") if self.window else ("full", "mamba")
        extra = {"sliding_window": self.window, "swa_kv_size": self.swa_kv_size} if self.window else {}
        self.cache = UnifiedRadixCache(
            components=components, page_size=self.page_size, kv_size=self.kv_size,
            mamba_size=self.mamba_size, device="cpu", **extra,
        )
        self.names = components
        self.mamba = self.cache.by_name["mamba"]
        self.extra_buffer = self.page_size > 1
        self.grid = grid_of(self.page_size)

    # ---- helpers ---------------------------------------------------------------
    def tokens(self, data) -> list[int]:
        return page_tokens(data, self.page_size, self.max_pages)

    def avail(self) -> dict[str, int]:
        return {n: self.cache.available_size(n) for n in self.names}

    def state_fp(self, slot) -> int:
        return self.mamba.pool.fingerprint_of(slot.reshape(-1)[:1])

    def diverges_inside_a_state(self, tokens) -> bool:
        """The walk stops partway through a node that holds a state."""
        return any(common < child.tokens and not child.components["mamba"].tombstone
                   for child, _, common in walk(self.cache.snapshot(), tokens))

    def protected_past_checkpoint(self, req) -> bool:
        """The known bug's trigger: caching would insert a key shorter than the
        request's protected prefix."""
        track = req.mamba_last_track_seqlen
        return self.extra_buffer and track is not None and 0 < track < req.cache_protected_len

    # ---- tree ops ---------------------------------------------------------------
    @rule(data=st.data(), reuse=st.booleans())
    def insert(self, data, reuse):
        cache = self.cache
        tokens, aligned, slots = self.key_and_slots(data, reuse)
        if slots is None:
            return
        prev, value = slots.prev, slots.value
        try:
            state = cache.alloc_mamba_state(tokens[:aligned])
        except PoolExhaustedError as exc:
            assert "mamba" in str(exc)
            event("insert: state pool exhausted")
            cache.free_kv([slots.fresh])
            slots.release()
            return
        evicted = 0
        if self.window:  # a request that slid past some of its SWA
            evicted = self.swa_floor(data, aligned)
            if evicted > prev:
                cache.free_swa(slots.fresh[: evicted - prev])
        params = InsertParams(
            RadixKey(tokens), value, mamba_value=state, prev_prefix_len=prev, swa_evicted_seqlen=evicted
        )
        result = cache.insert(params)
        if result.mamba_exist:
            cache.free_mamba_state(state)
        if aligned < len(tokens):
            cache.free_kv([value[aligned:]])
        slots.release()
        event(f"insert: mamba_exist = {result.mamba_exist}")
        if aligned:
            slot = cache.tree.node_by_id(result.last_device_node).data[self.mamba.index].value
            assert slot is not None and self.state_fp(slot) == fp(tokens[:aligned])
            if not result.mamba_exist:
                assert int(slot[0]) == int(state[0])

    @rule(data=st.data(), hold=st.booleans())
    def match(self, data, hold):
        cache = self.cache
        tokens = self.tokens(data)
        want, walked, best = expected_match(cache.snapshot(), tokens, self.window)
        m = cache.match_prefix(RadixKey(tokens))
        assert (m.prefix_len, m.full_kv_hit_length, m.best_match_node) == (want, walked, best)
        aligned = walked - walked % self.grid
        assert m.mamba_branching_seqlen == (aligned if aligned > want else None)
        assert verify_match(cache, tokens, m) == []
        event(f"match: stopped before the Full hit = {m.prefix_len < walked}")
        if hold:
            self.locks.append((m.last_device_node, cache.inc_lock_ref(m.last_device_node)))

    @rule(data=st.data(), skip_mamba=st.booleans())
    def lock_any_node(self, data, skip_mamba):
        node = self.pick(data, sorted(self.cache.tree.nodes))
        skip = ("mamba",) if skip_mamba else ()
        self.locks.append((node, self.cache.inc_lock_ref(node, skip)))

    @precondition(lambda self: self.window and any(not r.swa_released for _, r in self.locks))
    @rule(data=st.data())
    def release_window(self, data):
        cache = self.cache
        node, receipt = self.pick(data, [(n, r) for n, r in self.locks if not r.swa_released])
        mamba_locks = cache.tree.node_by_id(node).data[self.mamba.index].lock_ref
        cache.release_window(node, receipt)
        after = cache.tree.node_by_id(node).data[self.mamba.index].lock_ref
        # the co-located Mamba lock goes with the window (PR #28161), unless skipped
        kept = "mamba" in receipt.skipped_lock_components or node == cache.tree.root.id
        assert after == mamba_locks - (0 if kept else 1)
        try:
            cache.release_window(node, receipt)
        except LockError:
            pass
        else:
            raise AssertionError("a window released twice must be refused")

    @rule(n=st.integers(0, 40), which=st.sampled_from(["full", "swa", "mamba", "all"]))
    def evict(self, n, which):
        cache = self.cache
        if which == "swa" and not self.window:
            which = "mamba"
        full_n = n if which in ("full", "all") else 0
        swa_n = n if which in ("swa", "all") and self.window else 0
        mamba_n = n if which in ("mamba", "all") else 0
        before = self.avail()
        evictable = {name: cache.evictable_size(name) for name in self.names}
        r = cache.evict(EvictParams(num_tokens=full_n, swa_num_tokens=swa_n, mamba_num=mamba_n))
        after = self.avail()
        assert r.num_tokens_evicted == after["full"] - before["full"]
        assert r.mamba_num_evicted == after["mamba"] - before["mamba"]
        if self.window:
            assert r.swa_num_tokens_evicted == after["swa"] - before["swa"]
        # every unlocked unit is reachable by its component's walk
        assert r.num_tokens_evicted >= min(full_n, evictable["full"])
        assert r.mamba_num_evicted >= min(mamba_n, evictable["mamba"])
        if self.window:
            assert r.swa_num_tokens_evicted >= min(swa_n, evictable["swa"])
        event(f"evict {which}: states tombstoned = {cache.snapshot().tombstones('mamba') > 0}")

    # ---- request flows ----------------------------------------------------------
    @rule(data=st.data())
    def new_request(self, data):
        cache = self.cache
        tokens = self.tokens(data)
        want, _, best = expected_match(cache.snapshot(), tokens, self.window)
        src = cache.tree.nodes[best].data[self.mamba.index].value if want else None
        src = None if src is None else int(src[0])
        snap = cache.snapshot()
        if self.diverges_inside_a_state(tokens):
            event("new_request: prompt diverges inside a node holding a state")
        try:
            req = cache.new_request(tokens)
        except PoolExhaustedError as exc:
            event(f"new_request refused: {str(exc).split()[0]}")
            # only the match stays, as with SGLang's scheduler: a split, an LRU refresh, and
            # what the slot for its copy-on-write evicted (the slot itself goes back)
            after = cache.snapshot()
            assert after.requests == snap.requests, "a refused admission holds nothing"
            assert {n: v.held for n, v in after.pools.items()} == {n: v.held for n, v in snap.pools.items()}
            return
        self.reqs.append(req)
        assert req.cache_protected_len == want
        if src is not None:  # copy-on-write from the matched state
            assert int(req.mamba_cow_src[0]) == src and int(req.mamba_pool_idx[0]) != src
        event(f"new_request: copy-on-write = {src is not None}")

    @precondition(lambda self: self.reqs)
    @rule(data=st.data(), n=st.integers(1, 40), slide=st.booleans())
    def decode(self, data, n, slide):
        cache = self.cache
        req = self.pick(data, self.reqs)
        try:
            cache.extend_request(req, [9000 + len(req.output_ids) + i for i in range(n)])
        except CacheError:
            event("decode: pool exhausted")
            return
        if slide and self.window:
            cache.slide_window(req)

    @precondition(lambda self: self.reqs)
    @rule(data=st.data())
    def chunk(self, data):
        cache = self.cache
        req = self.pick(data, self.reqs)
        before = self.avail()["mamba"]
        track = req.mamba_last_track_seqlen
        snap = cache.snapshot()
        if self.protected_past_checkpoint(req):  # 0.5.23 asserts: ours refuses with nothing changed
            event("chunk: protected prefix past the checkpoint (SGLang asserts)")
            with pytest.raises(ReferenceAssertsError):
                cache.checkpoint(req)
            assert cache.snapshot() == snap
            return
        try:
            cache.checkpoint(req)
        except PoolExhaustedError as exc:
            assert "mamba" in str(exc)
            assert cache.snapshot() == snap, "a refused fork/donation must change nothing"
            event("chunk: no slot for the fork/donation")
            return
        if self.extra_buffer and track is None:
            assert self.avail()["mamba"] == before  # nothing tracked: nothing cached
        assert req.mamba_last_track_seqlen is None
        node = cache.tree.node_by_id(req.last_node)
        event(f"chunk: request anchored below the root = {node is not cache.tree.root}")
        if node is not cache.tree.root:
            slot = node.data[self.mamba.index].value
            assert slot is not None and self.state_fp(slot) == fp(req.fill_ids[: req.cache_protected_len])

    @precondition(lambda self: self.reqs)
    @rule(data=st.data(), insert=st.booleans())
    def finish(self, data, insert):
        req = self.reqs.pop(data.draw(st.integers(0, len(self.reqs) - 1)))
        if insert and self.protected_past_checkpoint(req):  # 0.5.23 asserts: refused, then released uncached
            event("finish: protected prefix past the checkpoint (SGLang asserts)")
            snap = self.cache.snapshot()
            with pytest.raises(ReferenceAssertsError):
                self.cache.release_kv_cache(req, checkpoint=True)
            assert self.cache.snapshot() == snap
            insert = False
        states = len(self.cache.tree.lru["mamba"])
        self.cache.release_kv_cache(req, checkpoint=insert)
        assert req.mamba_pool_idx is None and req.mamba_ping_pong is None
        if insert:
            event(f"finish: a new state cached = {len(self.cache.tree.lru['mamba']) > states}")
        else:
            assert len(self.cache.tree.lru["mamba"]) == states

    @invariant()
    def invariants_hold(self):
        super().invariants_hold()
        for req in self.reqs:  # a running state is the state after every computed token
            assert self.state_fp(req.mamba_pool_idx) == fp(req.fill_ids[: req.kv_len])
            if self.extra_buffer and req.mamba_last_track_seqlen:
                keep = req.mamba_next_track_idx ^ 1
                tracked = req.fill_ids[: req.mamba_last_track_seqlen]
                assert self.state_fp(req.mamba_ping_pong[keep : keep + 1]) == fp(tracked)

    def teardown(self):
        self.drain(checkpoint=lambda req: not self.protected_past_checkpoint(req))


class PagedMambaCacheMachine(MambaCacheMachine):
    """Page 4, extra buffer: three slots per request, checkpoints every 64 tokens."""

    page_size = 4
    kv_size = 320
    mamba_size = 10
    max_pages = 20


class HybridMambaCacheMachine(MambaCacheMachine):
    page_size = 1
    window = 4
    kv_size = 64
    swa_kv_size = 48
    mamba_size = 6


# MAMBA_EXAMPLES=600 for a longer hunt
_settings = settings(
    max_examples=int(os.environ.get("MAMBA_EXAMPLES", "60")),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestMambaStateful = MambaCacheMachine.TestCase
TestMambaStateful.settings = _settings
TestPagedMambaStateful = PagedMambaCacheMachine.TestCase
TestPagedMambaStateful.settings = _settings
TestHybridMambaStateful = HybridMambaCacheMachine.TestCase
TestHybridMambaStateful.settings = _settings
