"""Shared helpers for the SWA tests: a ``Checked`` cache with a sliding window.

``SWAChecked`` keeps the Full helper's contract (invariants after every call,
fingerprints after every match) and adds, for every match, an independent oracle of
the SWA match rule (spec §2.3 ``create_match_validator``, v0.5.23 ``swa.py``): the
boundary is the deepest node whose run of live SWA since the last tombstone covers a
window, or that has had no tombstone since the root. The oracle reads the snapshot
taken *before* the match, so it never trusts the implementation's answer.
"""

from __future__ import annotations

from typing import Optional

import torch

from cache import EvictParams, InsertParams, RadixKey

from conftest import Checked, seq, walk

# (page_size, sliding_window, kv_size): upstream's FULL+SWA configs this project runs
# (kv 256 like the fixture, 512 at page 16, 1024 for window 128).
SWA_CONFIGS = [(1, 4, 256), (4, 4, 256), (4, 2, 256), (16, 16, 512), (1, 128, 1024)]


def config_id(cfg) -> str:
    ps, sw, _ = cfg
    return f"ps{ps}-sw{sw}"


def tail_len(ps: int, sw: int) -> int:
    """The leaf window cap: ceil(sw / ps) * ps (spec §2.3 step 7)."""
    return -(-sw // ps) * ps


def pages(n_tokens: int, P: int) -> int:
    """How many pages ``n_tokens`` fill (a whole number of them, asserted)."""
    assert n_tokens % P == 0
    return n_tokens // P


def ceil_page(n: int, ps: int) -> int:
    return -(-n // ps) * ps


def reference_evicted_seqlen(evicted: int, pre_len: int, sw: int, ps: int, protected: int) -> int:
    """SGLang 0.5.23 ``free_swa_out_of_window_slots`` (mem_cache/common.py) on the radix
    path (prefix sharing, no retain floor, eviction interval 1, no evict floor): the
    request's new SWA cursor."""
    if pre_len - sw < evicted + 1:
        return evicted
    evicted = max(evicted, protected)
    threshold = pre_len - ceil_page(max(sw, ps), ps)
    new = max(evicted, threshold)
    new -= new % ps
    return max(evicted, new)


class SWAChecked(Checked):
    def __init__(self, page_size: int, sliding_window: int, kv_size: int, **config) -> None:
        super().__init__(
            components=("full", "swa"), page_size=page_size, kv_size=kv_size, sliding_window=sliding_window, **config
        )
        self.sw = sliding_window
        self.tail = tail_len(page_size, sliding_window)

    # ---- driving -------------------------------------------------------------
    def insert(self, tokens, prev_prefix_len: int = 0, value=None, swa_evicted_seqlen: int = 0, **kw):
        """Like ``Checked.insert``; with ``swa_evicted_seqlen`` E the fresh slots'
        SWA side below E is freed first (the request slid past them)."""
        if value is None:
            value = self.fresh(tokens)
            if swa_evicted_seqlen:
                self.cache.free_swa(value[:swa_evicted_seqlen])
        return super().insert(tokens, prev_prefix_len, value, swa_evicted_seqlen=swa_evicted_seqlen, **kw)

    def insert_after(self, node_id: int, tokens: list[int], **kw):
        """Insert ``tokens``, whose prefix is the path to ``node_id``, as a request
        holding that prefix would: only the new part gets fresh slots."""
        prefix = self.cache.path_device_indices(node_id)
        n = int(prefix.shape[0])
        value = torch.cat([prefix, self.fresh(tokens, n)])
        result = self.raw_insert(tokens, value, prev_prefix_len=n, **kw)
        aligned = len(tokens) - len(tokens) % self.ps
        if aligned < len(tokens):
            self.cache.free_kv([value[aligned:]])
            self.ok()
        return result

    def raw_insert(self, tokens, value, **kw):
        """Insert with caller-prepared slots; nothing else is freed."""
        result = self.cache.insert(InsertParams(RadixKey(tokens), value, **kw))
        self.ok()
        return result

    def match(self, tokens: list[int]):
        expected, walked = expected_match(self.cache.snapshot(), tokens, self.sw)
        result = super().match(tokens)
        assert result.prefix_len == expected, f"match returned {result.prefix_len}, the SWA rule gives {expected}"
        assert result.full_kv_hit_length == walked
        aligned = walked - walked % self.ps
        assert result.swa_branching_seqlen == (aligned if aligned > expected else None)
        snap = self.cache.snapshot()
        assert snap.node(result.last_device_node).path == tuple(tokens[:expected])
        return result

    def evict(self, num_tokens: int = 0, swa: int = 0):
        before = self.avail()
        result = self.cache.evict(EvictParams(num_tokens=num_tokens, swa_num_tokens=swa))
        self.ok()
        after = self.avail()
        # a free goes back to its pool exactly once
        assert after[0] - before[0] == result.num_tokens_evicted
        assert after[1] - before[1] == result.swa_num_tokens_evicted
        return result

    # ---- reading -------------------------------------------------------------
    def avail(self) -> tuple[int, int]:
        return self.cache.available_size("full"), self.cache.available_size("swa")

    def totals(self) -> tuple[int, int]:
        return self.cache.total_size("full"), self.cache.total_size("swa")

    def swa(self, node_id: int):
        return self.node(node_id).components["swa"]

    def full(self, node_id: int):
        return self.node(node_id).components["full"]

    def locks(self, *node_ids: int) -> list[tuple[int, int]]:
        """(full lock_ref, swa lock_ref) per node."""
        snap = self.cache.snapshot()
        return [(snap.node(i).components["full"].lock_ref, snap.node(i).components["swa"].lock_ref) for i in node_ids]

    def boundary(self, node_id: int) -> Optional[int]:
        return self.swa(node_id).extras.get("boundary")

    def full_value(self, node_id: int) -> torch.Tensor:
        return self.cache.tree.node_by_id(node_id).data[0].value.clone()

    def drain(self) -> None:
        """Everything is unlocked: evict it all; both pools must be whole again."""
        total = sum(self.totals())
        self.evict(num_tokens=total, swa=total)
        assert len(self.cache.snapshot().nodes) == 1, "nodes left after evicting everything"
        assert self.avail() == self.totals(), f"leak: available {self.avail()} of {self.totals()}"


def expected_match(snap, tokens: list[int], sw: int) -> tuple[int, int]:
    """(prefix_len, tokens walked) by the SWA validator rule, from a snapshot taken
    before the match: a node stopped inside is split, and its upper part keeps the
    node's SWA presence."""
    run, best, walked = float("inf"), 0, 0
    for child, off, common in walk(snap, tokens):
        walked += common
        if child.components["swa"].tombstone:
            run = 0
        else:
            run += common
            if run >= sw:
                best = off + common
    return best, walked


__all__ = [
    "SWA_CONFIGS",
    "SWAChecked",
    "ceil_page",
    "config_id",
    "expected_match",
    "pages",
    "reference_evicted_seqlen",
    "seq",
    "tail_len",
]
