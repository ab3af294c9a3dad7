"""Shared helpers for the Mamba tests: a ``Checked`` cache with a Mamba (SSM state)
component, alone with Full or stacked on Full+SWA.

``MambaChecked`` keeps the Full helper's contract (invariants after every call,
fingerprints after every match) and adds, for every match, an independent oracle of
the match rule (components spec §2.4 validator, v0.5.23 ``mamba.py``): the boundary is
the deepest node, walked whole, that holds a state (a node stopped inside is split and
its new parent never has one) and, with SWA, that the SWA validator accepts. The
oracle reads the snapshot taken *before* the match, so it never trusts the
implementation's answer. ``mamba_branching_seqlen`` is checked against
floor(full hit / grid) * grid when that is larger than the match.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from cache import EvictParams, InsertParams, MatchPrefixParams, RadixKey, Req, check_invariants, verify_match
from cache.pools.kv_buffer import prefix_fingerprints

from conftest import Checked, seq, walk

# (page_size, sliding_window, kv_size, mamba_size): upstream's FULL+MAMBA (ps 1, and ps 4
# with the extra buffer and mamba cache 60) and FULL+SWA+MAMBA configs (spec §8.1).
MAMBA_CONFIGS = [(1, None, 256, 20), (4, None, 256, 60), (1, 128, 1024, 20), (64, 64, 4096, 60)]
HYBRID_CONFIGS = [c for c in MAMBA_CONFIGS if c[1] is not None]

CHUNK = 64  # the model's SSM chunk (cache/components/mamba/component.py CHUNK_SIZE)


def config_id(cfg) -> str:
    ps, sw, _, _ = cfg
    return f"mamba-ps{ps}" if sw is None else f"swa{sw}-mamba-ps{ps}"


def grid_of(ps: int) -> int:
    """lcm(max(chunk, page), page): where checkpoints (and branching points) sit."""
    chunk = max(CHUNK, ps)
    return chunk * ps // math.gcd(chunk, ps)


def fp(tokens: list[int]) -> int:
    """The fingerprint of the state after ``tokens``."""
    return int(prefix_fingerprints(tokens, torch.device("cpu"))[-1])


class MambaChecked(Checked):
    def __init__(self, page_size: int, sliding_window: Optional[int] = None, kv_size: int = 256,
                 mamba_size: int = 20, **config) -> None:
        components = ("full", "swa", "mamba") if sliding_window else ("full", "mamba")
        if sliding_window:
            config["sliding_window"] = sliding_window
        super().__init__(components=components, page_size=page_size, kv_size=kv_size, mamba_size=mamba_size, **config)
        self.sw = sliding_window
        self.names = components
        self.grid = grid_of(page_size)
        self.extra_buffer = page_size > 1
        self.slots_per_req = 3 if self.extra_buffer else 1
        self.mamba = self.cache.by_name["mamba"]
        self.pool = self.mamba.pool
        self.reqs: list[Req] = []

    @classmethod
    def of(cls, cfg, **overrides) -> "MambaChecked":
        ps, sw, kv, m = cfg
        return cls(ps, sw, overrides.pop("kv_size", kv), overrides.pop("mamba_size", m), **overrides)

    def seq(self, start: int, pages: int) -> list[int]:
        return seq(start, pages, self.ps)

    # ---- driving -------------------------------------------------------------
    def insert(self, tokens, prev_prefix_len: int = 0, value=None, **kw):
        """Fresh KV for the key and a fresh state slot holding the state after its
        page-aligned part; the caller's state is freed when the tree already had one
        (``mamba_exist``), the unaligned tail as the request flow would."""
        cache = self.cache
        if value is None:
            value = self.fresh(tokens)
        aligned = len(tokens) - len(tokens) % self.ps
        state = cache.alloc_mamba_state(tokens[:aligned])
        params = InsertParams(RadixKey(tokens), value, mamba_value=state, prev_prefix_len=prev_prefix_len, **kw)
        result = cache.insert(params)
        if result.mamba_exist:
            cache.free_mamba_state(state)
        if aligned < len(tokens):
            cache.free_kv([value[aligned:]])
        self.ok()
        if aligned:
            node = result.last_device_node
            slot = self.state_slot(node)
            assert slot is not None, f"the insert ended on node {node} without a state"
            assert self.pool.fingerprint_of(torch.tensor([slot])) == fp(tokens[:aligned])
            if not result.mamba_exist:
                assert slot == int(state[0]), "a new state must be the caller's slot"
        return result

    def insert_after(self, node_id: int, tokens: list[int], **kw):
        """Insert ``tokens``, whose prefix is the path to ``node_id``, as a request
        holding that prefix would: only the new part gets fresh slots."""
        prefix = self.cache.path_device_indices(node_id)
        n = int(prefix.shape[0])
        value = torch.cat([prefix, self.fresh(tokens, n)])
        return self.insert(tokens, prev_prefix_len=n, value=value, **kw)

    def match(self, tokens: list[int]):
        expected, walked, best = expected_match(self.cache.snapshot(), tokens, self.sw)
        result = super().match(tokens)  # fingerprints: Full, SWA window, the state
        self.assert_match(result, tokens, expected, walked, best)
        return result

    def cow_match(self, tokens: list[int], req: Req):
        """A match with copy-on-write into ``req`` (checked like ``match``). The caller
        owns the request's slot afterwards."""
        expected, walked, best = expected_match(self.cache.snapshot(), tokens, self.sw)
        result = self.cache.match_prefix(MatchPrefixParams(RadixKey(tokens), cow_mamba=True, req=req))
        bad = verify_match(self.cache, tokens, result)
        assert not bad, bad
        self.assert_match(result, tokens, expected, walked, best)
        return result

    def assert_match(self, result, tokens, expected: int, walked: int, best: int) -> None:
        assert result.prefix_len == expected, f"match returned {result.prefix_len}, the rule gives {expected}"
        assert result.full_kv_hit_length == walked
        assert result.last_device_node == result.best_match_node == best
        aligned = walked - walked % self.grid
        assert result.mamba_branching_seqlen == (aligned if aligned > expected else None)
        assert self.node(best).path == tuple(tokens[:expected])

    def evict(self, num_tokens: int = 0, swa: int = 0, mamba: int = 0, call: str = "evict"):
        """``cache.evict`` (or ``call``, e.g. ``evict_for_alloc``), then invariants and
        the pool deltas checked against the reported counts."""
        before = self.avail()
        result = getattr(self.cache, call)(EvictParams(num_tokens=num_tokens, swa_num_tokens=swa, mamba_num=mamba))
        self.ok()
        self.assert_freed(before, result)
        return result

    def evict_for_alloc(self, num_tokens: int = 0, swa: int = 0, mamba: int = 0):
        return self.evict(num_tokens, swa, mamba, call="evict_for_alloc")

    def assert_freed(self, before: dict, result) -> None:
        """A free goes back to its pool exactly once: reported == pool deltas."""
        after = self.avail()
        assert after["full"] - before["full"] == result.num_tokens_evicted
        assert after.get("swa", 0) - before.get("swa", 0) == result.swa_num_tokens_evicted
        assert after["mamba"] - before["mamba"] == result.mamba_num_evicted

    def short_and_long(self, tail_pages: int = 2) -> tuple[list[int], list[int], int, int]:
        """Two states, one on an internal node and one on the leaf below it: ``short``
        (2 pages) and ``long`` (``tail_pages`` more), inserted in that order, with
        their nodes. The layout most eviction and lock cases start from."""
        short = self.seq(1, 2)
        long = short + self.seq(500, tail_pages)
        self.insert(short)
        self.insert(long)
        return short, long, self.node_at(short), self.node_at(long)

    def lock(self, node_id: int, skip: tuple[str, ...] = ()):
        receipt = self.cache.inc_lock_ref(node_id, skip)
        self.ok()
        return receipt

    # ---- requests ------------------------------------------------------------
    def new_request(self, tokens: list[int]) -> Req:
        req = self.cache.new_request(tokens)
        self.ok()
        self.reqs.append(req)
        return req

    def extend(self, req: Req, tokens: list[int]) -> None:
        self.cache.extend_request(req, tokens)
        self.ok()

    def unfinished(self, req: Req) -> None:
        self.cache.checkpoint(req)
        self.ok()

    def finish(self, req: Req, insert: bool = True) -> None:
        self.cache.release_kv_cache(req, checkpoint=insert)
        self.ok()
        self.reqs.remove(req)

    # ---- reading -------------------------------------------------------------
    def avail(self) -> dict[str, int]:
        return {name: self.cache.available_size(name) for name in self.names}

    def totals(self) -> dict[str, int]:
        return {name: self.cache.total_size(name) for name in self.names}

    def view(self, node_id: int, component: str = "mamba"):
        return self.node(node_id).components[component]

    def state_slot(self, node_id: int) -> Optional[int]:
        return self.view(node_id).extras.get("slot")

    def has_state(self, node_id: int) -> bool:
        return not self.view(node_id).tombstone

    def locks(self, node_id: int) -> tuple[int, ...]:
        """lock_ref per component, in registry order (Full, [SWA,] Mamba)."""
        comps = self.node(node_id).components
        return tuple(comps[name].lock_ref for name in self.names)

    def state_nodes(self) -> list[int]:
        return [n.id for n in self.cache.snapshot().non_root() if not n.components["mamba"].tombstone]

    def slot_fp(self, slot: torch.Tensor | int) -> int:
        if not isinstance(slot, torch.Tensor):
            slot = torch.tensor([slot])
        return self.pool.fingerprint_of(slot.reshape(-1)[:1])

    def assert_state(self, slot, tokens: list[int]) -> None:
        """``slot`` holds the state after ``tokens`` (fingerprint and tensors agree)."""
        slot = slot if isinstance(slot, torch.Tensor) else torch.tensor([slot])
        slot = slot.reshape(-1)[:1]
        assert self.pool.fingerprint_of(slot) == fp(tokens), "the slot does not hold the state after these tokens"
        assert self.pool.consistent(slot), "conv/ssm tensors disagree with the slot's fingerprint"

    def assert_cow(self, req: Req, src_node: int, tokens: list[int]) -> None:
        """The request got its own slot holding a copy of the source node's state,
        which is the state after ``tokens``."""
        src = self.state_slot(src_node)
        assert src is not None
        assert req.mamba_cow_src is not None and int(req.mamba_cow_src[0]) == src
        dst = int(req.mamba_pool_idx[0])
        assert dst != src, "copy-on-write must not hand out the tree's own slot"
        pool = self.pool
        assert torch.equal(pool.conv[dst], pool.conv[src]) and torch.equal(pool.ssm[dst], pool.ssm[src])
        self.assert_state(dst, tokens)

    def drain(self) -> None:
        """Finish every running request, then evict everything: every pool must be
        whole again and only the root left."""
        for req in list(self.reqs):
            self.finish(req)
        assert self.cache.full_protected_size() == 0, "a lock is still held"
        total = sum(self.totals().values())
        self.evict(num_tokens=total, swa=total if self.sw else 0, mamba=total)
        assert len(self.cache.snapshot().nodes) == 1, "nodes left after evicting everything"
        assert self.avail() == self.totals(), f"leak: available {self.avail()} of {self.totals()}"
        assert check_invariants(self.cache) == []


def evicted(result) -> tuple[int, int, int]:
    """An eviction's reported counts (Full tokens, SWA tokens, Mamba states), one tuple
    to compare against."""
    return result.num_tokens_evicted, result.swa_num_tokens_evicted, result.mamba_num_evicted


def expected_match(snap, tokens: list[int], sw: Optional[int]) -> tuple[int, int, int]:
    """(prefix_len, tokens walked, best node id) by the Mamba (and SWA) validator rule,
    from a snapshot taken before the match."""
    run, walked = float("inf"), 0
    best, best_id = 0, snap.root.id
    for child, off, common in walk(snap, tokens):
        walked += common
        whole = common == child.tokens  # a node stopped inside is split: its new parent has no state
        swa_ok = True
        if sw is not None:
            if child.components["swa"].tombstone:
                run, swa_ok = 0, False
            else:
                run += common
                swa_ok = run >= sw
        if whole and swa_ok and not child.components["mamba"].tombstone:
            best, best_id = off + common, child.id
    return best, walked, best_id


__all__ = [
    "HYBRID_CONFIGS", "MAMBA_CONFIGS", "MambaChecked", "config_id", "evicted", "expected_match", "fp", "grid_of", "seq",
]
