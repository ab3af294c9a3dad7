"""Unit tests of the intrusive LRU list (cache/tree/lru.py) and the evictable-leaf set
(cache/tree/leaf_set.py), on hand-built TreeNode objects."""

from __future__ import annotations

import random

import pytest

from cache.tree.leaf_set import EvictableLeafSet
from cache.tree.lru import LRUList
from cache.tree.node import TreeNode

SLOT, SLOTS = 1, 2  # use the second slot, so slot indexing is exercised


def node(node_id: int, length: int = 1, parent: TreeNode | None = None, t: float = 0.0) -> TreeNode:
    n = TreeNode(node_id, SLOTS, t)
    n.length = length
    n.parent = parent
    return n


def chain(lengths: list[int]) -> tuple[TreeNode, list[TreeNode]]:
    """root <- n1 <- n2 <- ...; returns (root, [n1, n2, ...])."""
    root = node(0, 0)
    nodes, parent = [], root
    for i, length in enumerate(lengths, start=1):
        parent = node(i, length, parent)
        nodes.append(parent)
    return root, nodes


def order(lru: LRUList) -> list[int]:
    return [n.id for n in lru]


def filled(mru_first: list[TreeNode]) -> LRUList:
    """A new LRU (on ``SLOT``) holding ``mru_first``: iteration (MRU first) yields it."""
    lru = LRUList(SLOT, SLOTS)
    for n in reversed(mru_first):
        lru.insert_mru(n)
    return lru


def check_links(lru: LRUList) -> None:
    """Walk both directions; they must agree with each other and with ``size``."""
    s = lru.slot
    fwd, cur = [], lru.head.lru_next[s]
    while cur is not lru.tail:
        fwd.append(cur)
        cur = cur.lru_next[s]
    back, cur = [], lru.tail.lru_prev[s]
    while cur is not lru.head:
        back.append(cur)
        cur = cur.lru_prev[s]
    assert fwd == back[::-1]
    assert len(fwd) == len(lru) == lru.size


# ---- LRUList basics -----------------------------------------------------------------


def test_insert_mru_orders_newest_first():
    lru = LRUList(SLOT, SLOTS)
    a, b, c = node(1), node(2), node(3)
    assert len(lru) == 0 and lru.lru_first() is None
    for n in (a, b, c):
        lru.insert_mru(n)
    assert order(lru) == [3, 2, 1]
    assert lru.lru_first() is a
    assert a in lru and node(9) not in lru and None not in lru
    # the other slot is untouched
    assert a.lru_prev[0] is None and a.lru_next[0] is None
    check_links(lru)


def test_insert_twice_is_refused():
    lru = LRUList(SLOT, SLOTS)
    a = node(1)
    lru.insert_mru(a)
    with pytest.raises(AssertionError):
        lru.insert_mru(a)
    with pytest.raises(AssertionError):
        lru.insert_after(a, a)
    assert order(lru) == [1]
    check_links(lru)


def test_insert_after_places_on_the_lru_side():
    a, b, c, x = node(1), node(2), node(3), node(4)
    lru = filled([a, b, c])
    lru.insert_after(a, x)
    assert order(lru) == [1, 4, 2, 3]
    y = node(5)
    lru.insert_after(c, y)  # after the LRU end: becomes the new LRU
    assert order(lru) == [1, 4, 2, 3, 5]
    assert lru.lru_first() is y
    check_links(lru)


def test_remove_and_reinsert():
    a, b, c = node(1), node(2), node(3)
    lru = filled([a, b, c])
    lru.remove(b)
    assert order(lru) == [1, 3] and b not in lru
    assert b.lru_prev[SLOT] is None and b.lru_next[SLOT] is None
    with pytest.raises(AssertionError):
        lru.remove(b)
    lru.remove(a)
    lru.remove(c)
    assert order(lru) == [] and len(lru) == 0
    lru.insert_mru(b)
    assert order(lru) == [2]
    check_links(lru)


def test_promote_moves_to_mru():
    a, b, c = node(1), node(2), node(3)
    lru = filled([a, b, c])
    lru.promote(c)
    assert order(lru) == [3, 1, 2]
    lru.promote(c)  # already MRU: stays
    assert order(lru) == [3, 1, 2]
    lru.promote(b)
    assert order(lru) == [2, 3, 1]
    with pytest.raises(AssertionError):
        lru.promote(node(9))
    check_links(lru)


def test_lru_first_and_prev_of_skip_locked():
    a, b, c = node(1), node(2), node(3)
    lru = filled([a, b, c])  # c is the LRU end
    c.data[SLOT].lock_ref = 1
    assert lru.lru_first() is b
    assert lru.lru_first(skip_locked=False) is c
    a.data[SLOT].lock_ref = 2
    assert lru.prev_of(b) is None
    assert lru.prev_of(b, skip_locked=False) is a
    # a lock in another slot does not count for this list
    c.data[SLOT].lock_ref = 0
    c.data[0].lock_ref = 5
    assert lru.lru_first() is c


# ---- promote_path: UnifiedLRUListBoundedRefreshTest (spec §8.1) ------------------------


def member(lru):
    return lambda n: n in lru


@pytest.mark.parametrize("lengths, held, window, expected", [
    ([2, 2, 2], "xabc", None, "cbax"),
    ([2, 2, 2, 2], "dcba", 5, "dcba"),
    ([2, 2, 2, 2], "xdcba", 5, "dcbxa"),  # the chain with an unrelated MRU node x in front
    ([3, 3, 3, 3], "abcd", 5, "dcab"),
], ids=["without_window_refreshes_whole_path", "bounded_a_window_5_lengths_2",
        "bounded_a_leaves_the_ancestor_past_the_window", "bounded_c_lengths_3_window_5"])
def test_promote_path_from_the_deepest_node(lengths, held, window, expected):
    """A chain a <- b <- c (<- d) with the given lengths, and x, an unrelated node, in the
    LRU as ``held`` (MRU first): promoting the deepest node's path moves it and its
    ancestors up to ``window`` tokens (all without one) ahead, giving ``expected``."""
    root, chain_nodes = chain(lengths)
    nodes = {**dict(zip("abcd", chain_nodes)), "x": node(9)}
    lru = filled([nodes[k] for k in held])
    lru.promote_path(chain_nodes[-1], root, member(lru), window=window)
    assert order(lru) == [nodes[k].id for k in expected]
    check_links(lru)


def test_bounded_refresh_b_absent_node_counts_but_is_skipped():
    root, (a, b, c, d) = chain([2, 2, 2, 2])
    lru = filled([d, c, a])
    visited = []

    def include(n):
        visited.append(n.id)
        return n in lru

    lru.promote_path(d, root, include, window=5)
    assert order(lru) == [d.id, c.id, a.id]
    assert visited == [d.id, c.id, b.id]  # A is not visited: B's length closed the window
    # with x in front, A stays behind x
    x = node(9)
    lru.insert_mru(x)
    lru.promote_path(d, root, member(lru), window=5)
    assert order(lru) == [d.id, c.id, x.id, a.id]
    check_links(lru)


def test_bounded_refresh_d_large_window_stops_at_root():
    root, (a, b) = chain([2, 2])
    lru = filled([a, b])
    visited = []

    def include(n):
        visited.append(n.id)
        return n in lru

    lru.promote_path(b, root, include, window=1000)
    assert order(lru) == [b.id, a.id]
    assert visited == [b.id, a.id]  # the root is never visited
    assert root not in lru
    check_links(lru)


def test_bounded_refresh_e_window_zero_is_a_noop():
    root, (a, b, c) = chain([2, 2, 2])
    lru = filled([a, b, c])
    visited = []
    lru.promote_path(c, root, lambda n: visited.append(n) or True, window=0)
    assert order(lru) == [a.id, b.id, c.id]
    assert visited == []
    check_links(lru)


def test_promote_path_window_equal_to_first_node():
    """The node whose length reaches the window is refreshed; the next one is not."""
    root, (a, b, c) = chain([4, 4, 4])
    x = node(9)
    lru = filled([x, a, b, c])
    lru.promote_path(c, root, member(lru), window=4)
    assert order(lru) == [c.id, x.id, a.id, b.id]


# ---- EvictableLeafSet -----------------------------------------------------------------


def leaf(node_id: int, t: float) -> TreeNode:
    n = TreeNode(node_id, 1, t)
    n.last_access_time = t
    return n


def test_leaf_set_membership():
    ls = EvictableLeafSet()
    a, b = leaf(1, 1.0), leaf(2, 2.0)
    assert len(ls) == 0 and ls.peek_oldest() is None
    ls.add(a)
    ls.add(a)  # idempotent
    ls.add(b)
    assert len(ls) == 2 and a in ls and a.in_leaf_set
    assert set(ls) == {a, b}
    ls.discard(a)
    ls.discard(a)  # idempotent
    assert len(ls) == 1 and a not in ls and not a.in_leaf_set
    ls.clear()
    assert len(ls) == 0 and not b.in_leaf_set and ls.peek_oldest() is None


def test_peek_oldest_tracks_touches_and_discards():
    ls = EvictableLeafSet()
    a, b, c = leaf(1, 1.0), leaf(2, 2.0), leaf(3, 3.0)
    for n in (a, b, c):
        ls.add(n)
    assert ls.peek_oldest() is a
    a.last_access_time = 10.0  # touched: now the newest
    assert ls.peek_oldest() is b
    b.last_access_time = 11.0
    assert ls.peek_oldest() is c
    ls.discard(c)
    assert ls.peek_oldest() is a
    ls.add(c)  # back, with its old (smallest) time
    assert ls.peek_oldest() is c
    # peek does not remove
    assert ls.peek_oldest() is c and len(ls) == 3


def test_peek_oldest_ties_break_by_id():
    ls = EvictableLeafSet()
    a, b = leaf(7, 5.0), leaf(3, 5.0)
    ls.add(a)
    ls.add(b)
    assert ls.peek_oldest() is b


def test_readd_after_touch_while_out_of_the_set():
    ls = EvictableLeafSet()
    a, b = leaf(1, 1.0), leaf(2, 2.0)
    ls.add(a)
    ls.add(b)
    ls.discard(a)
    a.last_access_time = 5.0
    ls.add(a)
    assert ls.peek_oldest() is b
    ls.discard(b)
    assert ls.peek_oldest() is a


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_leaf_set_matches_a_reference_model(seed):
    """Random adds, discards and touches (times only grow), enough to force several
    compactions; peek_oldest always equals the brute-force minimum."""
    rng = random.Random(seed)
    clock = 1.0
    pool = []
    for i in range(64):
        pool.append(leaf(i, clock))
        clock += 1.0
    ls = EvictableLeafSet()
    members: set[int] = set()
    for step in range(6000):
        n = rng.choice(pool)
        op = rng.random()
        if op < 0.35:
            ls.add(n)
            members.add(n.id)
        elif op < 0.65:
            ls.discard(n)
            members.discard(n.id)
        else:
            n.last_access_time = clock
            clock += 1.0
            if n.in_leaf_set:  # the tree re-adds a touched leaf; the set must cope either way
                ls.add(n)
        assert {m.id for m in ls} == members
        want = min((p for p in pool if p.id in members), key=lambda p: (p.last_access_time, p.id), default=None)
        assert ls.peek_oldest() is want, f"step {step}"
    # lazy entries never pile up without bound: compaction kicks in
    assert len(ls._heap) <= 4 * len(pool) + 256 + 1


def test_compaction_under_churn_keeps_the_oldest():
    ls = EvictableLeafSet()
    keeper = leaf(0, 0.5)
    ls.add(keeper)
    churn = leaf(1, 1.0)
    for i in range(2000):
        ls.add(churn)
        ls.discard(churn)
        churn.last_access_time = 2.0 + i
    assert ls.peek_oldest() is keeper
    assert len(ls._heap) <= 4 * 2 + 256 + 1  # bounded by the compaction threshold
    ls.discard(keeper)
    assert ls.peek_oldest() is None
