"""Shared helpers: a cache that checks every invariant after every step."""

from __future__ import annotations

import dataclasses
from typing import Optional

import pytest
import torch

from cache import (CacheError, EvictParams, InsertParams, MatchPrefixParams, RadixKey, UnifiedRadixCache,
                   check_invariants, verify_match)


def seq(start: int, pages: int, page_size: int) -> list[int]:
    """``pages`` pages of consecutive tokens starting at ``start`` (upstream's seq())."""
    return list(range(start, start + pages * page_size))


def walk(snap, tokens: list[int]):
    """The nodes a match of ``tokens`` walks, read from a snapshot taken before it:
    ``(node, offset, common)`` each, ``common`` the page-aligned tokens it shares (the
    last may stop inside the node). The SWA and Mamba match oracles share this walk;
    only their rules for where the match may end differ."""
    ps = snap.page_size
    limit = len(tokens) - len(tokens) % ps
    by_id = {n.id: n for n in snap.nodes}
    node, off = snap.root, 0
    while off < limit:
        page = tuple(tokens[off : off + ps])
        child = next((c for c in map(by_id.get, node.children) if c.extra_key is None and c.key[:ps] == page), None)
        if child is None:
            return
        common = 0
        while common < child.tokens and off + common < limit and child.key[common] == tokens[off + common]:
            common += 1
        common -= common % ps
        yield child, off, common
        if common < child.tokens:
            return
        node, off = child, off + common


class Checked:
    """Drives a cache like upstream's unit tests do, checking invariants after each call
    and fingerprints after each match."""

    def __init__(self, **config) -> None:
        config.setdefault("device", "cpu")
        self.cache = UnifiedRadixCache(**config)
        self.ps = self.cache.page_size

    def ok(self) -> None:
        violations = check_invariants(self.cache)
        assert not violations, "\n".join(map(str, violations))

    def fresh(self, tokens: list[int], start: int = 0) -> torch.Tensor:
        """Fresh slots (in every pool) with the KV of tokens[start:] written."""
        value = self.cache.alloc_kv(len(tokens) - start)
        self.cache.write_kv(value, tokens, start)
        return value

    def insert(self, tokens: list[int], prev_prefix_len: int = 0, value: torch.Tensor | None = None, **kw):
        """Allocate fresh slots for the whole key, write its KV, insert, free the
        unaligned tail (as the request flow would)."""
        cache = self.cache
        if value is None:
            value = self.fresh(tokens)
        result = cache.insert(InsertParams(RadixKey(tokens), value, prev_prefix_len=prev_prefix_len, **kw))
        aligned = len(tokens) - len(tokens) % self.ps
        if aligned < len(tokens):
            cache.free_kv([value[aligned:]])
        self.ok()
        return result

    def match(self, tokens: list[int]):
        result = self.cache.match_prefix(MatchPrefixParams(RadixKey(tokens)))
        bad = verify_match(self.cache, tokens, result)
        assert not bad, bad
        self.ok()
        return result

    def evict(self, num_tokens: int = 0, **kw):
        result = self.cache.evict(EvictParams(num_tokens=num_tokens, **kw))
        self.ok()
        return result

    def lock(self, node_id: int):
        receipt = self.cache.inc_lock_ref(node_id)
        self.ok()
        return receipt

    def unlock(self, node_id: int, receipt) -> None:
        self.cache.dec_lock_ref(node_id, receipt)
        self.ok()

    def release_window(self, node_id: int, receipt) -> None:
        self.cache.release_window(node_id, receipt)
        self.ok()

    def node(self, node_id: int):
        return self.cache.snapshot().node(node_id)

    def node_at(self, path: list[int]) -> int:
        """The node whose root path is exactly ``path``."""
        target = tuple(path)
        for node in self.cache.snapshot().nodes:
            if node.path == target:
                return node.id
        raise KeyError(f"no node ends at a {len(path)}-token path")


def lock_ref(cache, node_id: int) -> int:
    return cache.snapshot().node(node_id).components["full"].lock_ref


def matched(full: Checked, tokens: list[int]) -> int:
    return full.match(tokens).prefix_len


def root_children(cache) -> int:
    return len(cache.tree.root.children)


def assert_empty_tree(full: Checked) -> None:
    cache = full.cache
    assert root_children(cache) == 0
    snap = cache.snapshot()
    assert len(snap.nodes) == 1 and snap.nodes[0].parent is None
    assert cache.full_evictable_size() == 0
    assert cache.full_protected_size() == 0
    assert cache.available_size() == cache.total_size()


def stray(n: int, start: int = 9000) -> list[int]:
    return list(range(start, start + n))


@dataclasses.dataclass
class RequestSlots:
    """Slots for inserting a key the way a request does: ``prev`` tokens reuse the
    tree's own slots (the matched prefix, locked meanwhile), the rest are fresh with
    their KV written. ``release()`` drops that lock once the insert is done."""

    cache: UnifiedRadixCache
    prev: int
    fresh: torch.Tensor
    value: torch.Tensor
    node: Optional[int] = None
    receipt: object = None

    def release(self) -> None:
        if self.receipt is not None:
            self.cache.dec_lock_ref(self.node, self.receipt)
            self.receipt = None


def take_request_slots(cache: UnifiedRadixCache, tokens: list[int], reuse: bool) -> Optional[RequestSlots]:
    """None when the pools cannot provide the fresh slots (nothing is left locked)."""
    prev, node, receipt, prefix = 0, None, None, None
    if reuse:
        m = cache.match_prefix(RadixKey(tokens))
        prev, node, prefix = m.prefix_len, m.last_device_node, m.device_indices
        receipt = cache.inc_lock_ref(node)
    try:
        fresh = cache.alloc_kv(len(tokens) - prev)
    except CacheError:
        if receipt is not None:
            cache.dec_lock_ref(node, receipt)
        return None
    cache.write_kv(fresh, tokens, prev)
    value = torch.cat([prefix, fresh]) if prev else fresh
    return RequestSlots(cache, prev, fresh, value, node, receipt)


@pytest.fixture(params=[1, 4, 16], ids=lambda ps: f"ps{ps}")
def page_size(request) -> int:
    return request.param


@pytest.fixture
def full(page_size) -> Checked:
    """A Full-only cache (upstream fixture size: 256 tokens; 512 at page 16)."""
    return Checked(page_size=page_size, kv_size=256 if page_size < 16 else 512)
