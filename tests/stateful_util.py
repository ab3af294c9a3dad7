"""What the cache state machines (Hypothesis stateful tests) share: the locks and
running requests they hold, dropping a random lock, the invariant sweep after every
step, the teardown that gives everything back and checks nothing leaked, and the
page-symbol keys over shared stems."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import event
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from cache import EvictParams, check_invariants

from conftest import take_request_slots

# a few stems sharing prefixes, so keys split nodes and hit duplicates
STEMS = [[1, 2, 3, 4], [1, 2, 5, 6], [7, 8, 9, 10], [1, 2, 3, 4, 11, 12, 13, 14]]


def page_tokens(data, page_size: int, max_pages: int = 10) -> list[int]:
    """Page symbols over ``STEMS``, each symbol a page of tokens, plus an optional
    unaligned tail (the keys of the paged machines)."""
    stem = STEMS[data.draw(st.integers(0, len(STEMS) - 1))]
    tail = data.draw(st.lists(st.integers(1, 4), max_size=max_pages - 4))
    extra = data.draw(st.integers(0, page_size - 1)) if page_size > 1 else 0
    out = [sym * 100 + j for sym in stem + tail for j in range(page_size)]
    return out + [7777 + j for j in range(extra)]


class CacheMachineBase(RuleBasedStateMachine):
    """A machine driving ``self.cache`` (set by the subclass), holding the node locks it
    took (``locks``: (node, receipt)) and its running requests (``reqs``)."""

    drain_evicts: tuple[str, ...] = ()  # the components teardown asks to evict (none named: all)

    def __init__(self) -> None:
        super().__init__()
        self.locks: list[tuple[int, object]] = []
        self.reqs = []

    def pick(self, data, items):
        """One of ``items``, drawn."""
        return items[data.draw(st.integers(0, len(items) - 1))]

    def key_and_slots(self, data, reuse: bool):
        """A key from the machine's ``tokens(data)``, its page-aligned length, and slots to
        insert it as a request would: ``None``, counted as an event, when the pools are short."""
        tokens = self.tokens(data)
        slots = take_request_slots(self.cache, tokens, reuse)
        if slots is None:
            event("insert: KV pool exhausted")
        return tokens, len(tokens) - len(tokens) % self.page_size, slots

    def swa_floor(self, data, aligned: int) -> int:
        """A page-aligned ``swa_evicted_seqlen`` up to ``aligned``: how far the inserting
        request slid its window."""
        return data.draw(st.integers(0, aligned // self.page_size)) * self.page_size

    @precondition(lambda self: self.locks)
    @rule(data=st.data())
    def unlock(self, data):
        node, receipt = self.locks.pop(data.draw(st.integers(0, len(self.locks) - 1)))
        self.cache.dec_lock_ref(node, receipt)

    @invariant()
    def invariants_hold(self):
        violations = check_invariants(self.cache)
        assert not violations, "\n".join(map(str, violations))

    def teardown(self):
        self.drain()

    def drain(self, checkpoint=lambda req: True) -> None:
        """Every lock dropped and request released (cached where ``checkpoint(req)``),
        nothing left protected; evicting everything then leaves only the root and every
        pool whole, with the invariants holding before and after."""
        cache = self.cache
        for node, receipt in self.locks:
            cache.dec_lock_ref(node, receipt)
        for req in self.reqs:
            cache.release_kv_cache(req, checkpoint=checkpoint(req))
        assert check_invariants(cache) == []
        names = [component.name for component in cache.components]
        for name in names:
            assert cache.protected_size(name) == 0, f"{name} still protected"
        cache.evict(EvictParams.of({name: cache.total_size(name) for name in self.drain_evicts or names}))
        assert len(cache.tree.nodes) == 1, "nodes left after evicting everything"
        for name in names:
            assert cache.available_size(name) == cache.total_size(name), f"{name} slots leaked"
        assert check_invariants(cache) == []
