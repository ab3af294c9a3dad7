"""The Mamba model options of SGLang 0.5.23 (issue 28): the per-path state cap, the
extra buffer as its own switch, and the decode re-lock that skips the Mamba state.

The cap test replays /work/shared/oracle/examples-ext/mamba_cap_p1 (what SGLang 0.5.23
answered for the same ops)."""

from __future__ import annotations

import pytest

from cache.controller.unified_radix_cache import UnifiedRadixCache
from cache.observe.events import Cause, EventKind

from mamba_util import MambaChecked


def keys_with_state(c: MambaChecked) -> set[tuple]:
    return {c.node(n).path for n in c.state_nodes()}


def capped(cap: int = 2) -> MambaChecked:
    return MambaChecked(1, kv_size=128, mamba_size=20, mamba_max_states_per_path=cap)


def test_a_third_state_on_a_path_drops_the_shallowest_and_keeps_its_full_kv():
    c = capped()
    events = []
    c.cache.events.subscribe(events.append)
    for n in (4, 6, 8):
        c.insert(list(range(1, n + 1)))
    assert keys_with_state(c) == {tuple(range(1, 7)), tuple(range(1, 9))}
    top = c.node_at([1, 2, 3, 4])
    assert c.node(top).components["full"].value_len == 4  # only the state went
    dropped = [e for e in events if e.kind is EventKind.TOMBSTONE]
    assert [(e.component, e.node, e.cause, e.detail) for e in dropped] == [("mamba", top, Cause.PATH_CAP, "cap 2")]
    assert c.avail()["mamba"] == 18  # its slot went back to the pool
    c.evict(1000, mamba=1000)


def test_forks_locked_states_and_the_tail_are_spared_so_the_cap_is_soft():
    c = capped()
    for key in ([1, 2, 3, 4], [1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 7, 8], [1, 2, 3, 4, 7, 8, 9, 10]):
        c.insert(key)
    # [1..4] is a fork: the cap takes [7, 8]'s state instead
    assert keys_with_state(c) == {(1, 2, 3, 4), (1, 2, 3, 4, 5, 6), (1, 2, 3, 4, 7, 8, 9, 10)}
    locked = c.node_at([1, 2, 3, 4, 5, 6])
    receipt = c.lock(locked)
    c.insert([1, 2, 3, 4, 5, 6, 11, 12])
    c.insert([1, 2, 3, 4, 5, 6, 11, 12, 13, 14])
    # 3 states stay on the path: the fork and the locked node are spared
    path_states = {k for k in keys_with_state(c) if k[:6] == (1, 2, 3, 4, 5, 6) or len(k) <= 6}
    assert path_states >= {(1, 2, 3, 4), (1, 2, 3, 4, 5, 6), tuple(range(1, 7)) + (11, 12, 13, 14)}
    assert (1, 2, 3, 4, 5, 6, 11, 12) not in keys_with_state(c)
    c.unlock(locked, receipt)
    # a finished request's insert caps too: it runs while the request still locks node 10
    req = c.new_request([1, 2, 3, 4, 5, 6, 11, 12, 13, 14, 15, 16])
    c.finish(req)
    assert keys_with_state(c) == {(1, 2, 3, 4), tuple(range(1, 7)) + (11, 12, 13, 14),
                                  tuple(range(1, 7)) + (11, 12, 13, 14, 15, 16), (1, 2, 3, 4, 7, 8, 9, 10)}
    assert c.evict(1000, mamba=1000).num_tokens_evicted == 16
    assert c.avail() == {"full": 128, "mamba": 20}


def test_without_the_cap_every_state_stays():
    c = MambaChecked(1, kv_size=128, mamba_size=20)
    for n in (4, 6, 8):
        c.insert(list(range(1, n + 1)))
    assert len(c.state_nodes()) == 3


@pytest.mark.parametrize("value", [0, -2, True, "2"])
def test_the_cap_refuses_zero_and_below_minus_one(value):
    with pytest.raises(ValueError, match="mamba_max_states_per_path"):
        UnifiedRadixCache(components=("full", "mamba"), mamba_size=8, mamba_max_states_per_path=value)


def test_extra_buffer_is_legal_at_page_one_and_refused_off_above_it():
    on = UnifiedRadixCache(components=("full", "mamba"), mamba_size=8, mamba_extra_buffer=True)
    assert on.by_name["mamba"].extra_buffer and on.by_name["mamba"].slots_for_request() == 3
    assert not UnifiedRadixCache(components=("full", "mamba"), mamba_size=8).by_name["mamba"].extra_buffer
    assert UnifiedRadixCache(components=("full", "mamba"), page_size=4, mamba_size=8).by_name["mamba"].extra_buffer
    with pytest.raises(ValueError, match="mamba_extra_buffer false needs page_size 1"):
        UnifiedRadixCache(components=("full", "mamba"), page_size=4, mamba_size=8, mamba_extra_buffer=False)


def test_skip_decode_lock_leaves_the_checkpoint_state_unlocked():
    for skip in (False, True):
        c = MambaChecked(1, mamba_skip_decode_lock=skip)
        req = c.new_request(list(range(1, 9)))
        c.unfinished(req)
        node = req.last_node
        assert c.locks(node) == (1, 0 if skip else 1)
        c.finish(req)
        c.drain()
