"""Prefetch from the storage tier into host slots (SGLang 0.5.23's L3 -> L2 path).

A prefetch is anchored at the match's last host node: the pages after it are looked
up in storage by their hash chain, host slots are taken for what storage holds, the
pages are read into them, and the completion places them in the tree as host-only
nodes (``insert_host``, tree/prefetch_placement.py); a later load-back brings them to the
device like any host hit. From issue to completion the anchor is host-locked, so
host eviction cannot take the node the fetched pages will hang from, and the span
requested counts against the prefetch budget (half the host pool, SGLang's rate
limit).

The stages run where SGLang's threads and scheduler polls run them, made
deterministic: with ``transfers = "immediate"`` a prefetch runs to its end inside the
op that issues it; with ``"held"`` each ``flush`` (``check_hicache_events``) moves
every prefetch in flight through its stages (hit query, host allocation, read, the
ack's completion), each stage for all of them before the next. A backend call an injector delays (backends/injector.py) waits
that many flushes. ``check_prefetch_progress`` is the scheduler's admission poll: its
stop policy decides whether a prefetch still in flight is cut there —
``best_effort`` takes what has arrived (nothing, before the host slots were taken),
``wait_complete`` waits for the ack, ``timeout`` waits a number of flushes counted
from the first poll that found it unfinished (SGLang's wall-clock seconds, as steps).

With SWA or Mamba in the tree a prefetch also stages their trailing data, all or
nothing (staging.py): the hit is the longest prefix where their pages are
stored too, and a shortfall in any pool discards the whole prefetch.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import TYPE_CHECKING, NamedTuple, Optional

import torch

from ..basics.base_component import FULL
from ..observe.events import Cause, EventKind
from ..basics.keys import RadixKey
from ..basics.page_hash import chain, storage_seed
from ..basics.params import MatchPrefixParams
from .backends import BATCH_PAGES
from .backends.injector import transfer_delay
from .staging import Staging, allocate, commit, plan, read, release, restorable_pages, shortfall

if TYPE_CHECKING:
    from .owner import StorageSide
    from ..tree.node import TreeNode

PREFETCH_MARK = "prefetching"  # metadata key on Full's data: the ids of the prefetches anchored (host-locked) there
# SGLang's _prefetch_outcome_stats, the counts it keeps of prefetch decisions
OUTCOMES = ("attempts", "issued", "declined_too_short", "declined_rate_limited", "revoked_insufficient",
            "revoked_full_miss", "l3_demand_requests", "l3_miss_tokens", "l1l2_miss_tokens")


class PrefetchIssue(NamedTuple):
    issued: bool
    reason: str  # why not ("" when issued): too_short, rate_limited, anchor_not_backed_up, in_flight, nothing_to_fetch
    tokens: int  # the span asked of storage (whole pages after the match)


@dataclasses.dataclass(eq=False)
class Prefetch:
    """One request's prefetch in flight (SGLang's ``ongoing_prefetch`` entry)."""

    rid: str
    anchor: TreeNode  # host-locked until the prefetch ends
    key: RadixKey  # the span asked for: whole pages after the anchor
    hashes: list[str]  # its pages' hash chain (cut to the hit, then to the slots taken)
    hit: Optional[int] = None  # tokens storage holds from the start (None: not asked yet)
    rows: Optional[torch.Tensor] = None  # host slots taken for the hit (None: not yet)
    taken: int = 0  # when they were taken (StoragePrefetch.allocations): reads run in that order
    completed: int = 0  # tokens read into ``rows``
    read: bool = False  # the read ran (its ack is due)
    terminated: bool = False  # cut by the stop policy
    deadline: bool = False  # cut by the timeout policy
    wait: int = 0  # flushes a delayed backend call still waits
    asked: frozenset = frozenset()  # backend calls whose delay was already asked ("exists", "get")
    blocked_since: Optional[int] = None  # the flush count at the first poll that found it unfinished
    stagings: list[Staging] = dataclasses.field(default_factory=list)  # SWA's and Mamba's trailing pages
    receipts: Optional[dict] = None  # the auxiliary host locks on the anchor


class StoragePrefetch:
    """The prefetches of one storage tier (``StorageTier.prefetch``)."""

    def __init__(self, tier: StorageSide) -> None:
        self.tier = tier
        self.cache = tier.cache
        config = tier.config
        self.policy = config.prefetch_policy
        self.threshold = config.prefetch_threshold
        self.timeout_base, self.timeout_per_page = config.prefetch_timeout_base, config.prefetch_timeout_per_page
        self.capacity_limit = int(0.5 * self.cache.config.hicache.host_kv_size)  # v0.5.23: half the host pool
        self.ongoing: dict[str, Prefetch] = {}
        self.occupied = 0  # tokens requested by the prefetches in flight (prefetch_tokens_occupied)
        self.loaded: dict[str, int] = {}  # rid -> tokens its completed prefetch put on the host
        self.flushes = 0  # the clock of the timeout policy
        self.allocations = 0  # host slot allocations made: the order reads run in
        self.outcomes: Counter[str] = Counter()

    def reset(self) -> None:
        self.ongoing.clear()  # their locks and slots went with the tree and the pools
        self.occupied = 0
        self.loaded.clear()

    # ---- issue ---------------------------------------------------------------------
    def prefetch_from_storage(self, rid: str, key: RadixKey) -> PrefetchIssue:
        """The scheduler's ``_prefetch_kvcache`` and the cache's ``prefetch_from_storage``:
        match ``key`` (a request's input), anchor at the match's last host node, and ask
        storage for the whole pages after the match, up to the prefix limit."""
        cache, tree = self.cache, self.cache.tree
        if rid in self.ongoing:
            return PrefetchIssue(False, "in_flight", 0)
        key = self._units(key)
        match = cache.match_prefix(MatchPrefixParams(key))
        anchor = tree.node_by_id(match.last_host_node)
        if anchor is not tree.root and not tree.backed_up(anchor):  # write-through's chain has a hole: a sure miss
            return self._declined(rid, anchor, 0, "anchor_not_backed_up", f"the match's last host node #{anchor.id} "
                                  "has no host copy")
        start = match.device_prefix_len + match.host_hit_length
        span = key[start : max(start, self.prefix_limit(key))].page_aligned(self.cache.page_size)
        if not len(span):
            return self._declined(rid, anchor, 0, "nothing_to_fetch", "no whole page after the match")
        self.outcomes["attempts"] += 1
        if len(span) < self.threshold:
            self.outcomes["declined_too_short"] += 1
            return self._declined(rid, anchor, len(span), "too_short", f"{len(span)} tokens after the match, "
                                  f"under prefetch_threshold {self.threshold}")
        if self.occupied >= self.capacity_limit:
            self.outcomes["declined_rate_limited"] += 1
            return self._declined(rid, anchor, len(span), "rate_limited", f"prefetches in flight hold {self.occupied} "
                                  f"tokens, the budget is {self.capacity_limit} (half the host pool)")
        receipts = None
        if anchor is not tree.root:  # the mark travels to the upper part of a split, as the lock does
            full = anchor.data[0]
            full.metadata[PREFETCH_MARK] = full.metadata.get(PREFETCH_MARK, ()) + (rid,)
            tree.hold_host([anchor], +1)
            receipts = tree.lock_aux_host(anchor) if tree.host_components else None
        stagings = plan(cache.host, anchor, len(span) // cache.page_size)
        prefetch = Prefetch(rid, anchor, span, self._hashes(anchor, span), stagings=stagings, receipts=receipts)
        self.ongoing[rid] = prefetch
        self.occupied += len(span)
        self.outcomes["issued"] += 1
        where = "the root" if anchor is tree.root else f"node #{anchor.id}, host-locked"
        self._emit(prefetch, "issued", len(span), f"{len(span)} tokens after {where}")
        if not self.tier.held:
            self._advance(prefetch)
        return PrefetchIssue(True, "", len(span))

    @staticmethod
    def prefix_limit(key: RadixKey) -> int:
        """Where the span asked of storage ends: the most a request's match may reuse,
        one token short of its input (SGLang's ``_compute_max_prefix_len``: the last token
        is computed for its logprob), so the window fetched is the one its match needs
        (sgl-project/sglang#27291). On an EAGLE key it counts pairs: the input less one
        token spans one pair fewer than the key."""
        return max(len(key) - 1, 0)

    def _units(self, key: RadixKey) -> RadixKey:
        """``key`` in the tree's units: EAGLE's bigram view (v0.5.23 keys the span
        ``RadixKey(tokens, is_bigram=is_eagle)``), so spans, thresholds and the budget
        count pairs."""
        return key.bigram_view() if self.cache.bigram_keys else key

    def _declined(self, rid: str, anchor: TreeNode, tokens: int, reason: str, why: str) -> PrefetchIssue:
        self._note(rid, anchor, tokens, f"prefetch declined ({reason}): {why}")
        return PrefetchIssue(False, reason, tokens)

    def _hashes(self, anchor: TreeNode, span: RadixKey) -> list[str]:
        """The span's page hashes, chained from the anchor's last (the namespace seed at the
        root); an EAGLE span's pairs begin with the token before it, as its pages were stored."""
        if anchor is self.cache.tree.root:
            prior = storage_seed(span.extra_key, span.cache_salt)
        else:
            prior = anchor.page_hashes[-1]
        return chain(span.data, self.cache.page_size, prior, span.bigram_head if span.is_bigram else None)

    def query_storage_hit_length(self, key: RadixKey) -> int:
        """How much of ``key`` after its match storage holds (0 below the threshold or
        while rate limited), asked now: v0.5.23's admission probe, after the match the
        scheduler makes first (it is a match: it may split a node)."""
        tree = self.cache.tree
        key = self._units(key)
        match = self.cache.match_prefix(MatchPrefixParams(key))  # the scheduler's match before its probe
        if self.occupied >= self.capacity_limit:
            return 0
        anchor = tree.node_by_id(match.last_host_node)
        span = key[match.device_prefix_len + match.host_hit_length :].page_aligned(self.cache.page_size)
        if len(span) < self.threshold or (anchor is not tree.root and not anchor.page_hashes):
            return 0
        return self.tier.backend.exists_prefix(self._hashes(anchor, span)) * self.cache.page_size

    # ---- the stages ------------------------------------------------------------------
    def pump(self) -> int:
        """A flush: every prefetch in flight goes as far as it can. Returns how many ended."""
        self.flushes += 1
        before = len(self.ongoing)
        self._advance(*self.ongoing.values())
        return before - len(self.ongoing)

    def _delayed(self, prefetch: Prefetch, call: str) -> bool:
        """Whether the backend call ``call`` waits (an injected delay, asked once): a
        delay of N made at one flush is made good N flushes later."""
        if prefetch.wait:
            prefetch.wait -= 1
            return prefetch.wait > 0
        if call not in prefetch.asked:
            prefetch.asked |= {call}
            prefetch.wait = transfer_delay(self.tier.backend, call, prefetch.hashes)
            if prefetch.wait:
                self._emit(prefetch, "delayed", 0, f"storage {call} waits {prefetch.wait} flush(es)")
                return True
        return False

    def _advance(self, *prefetches: Prefetch) -> None:
        """Each stage for all of ``prefetches`` before the next, as SGLang's prefetch thread
        queries every queued prefetch before the scheduler's poll takes host slots for the
        hits, in turn, and its I/O thread reads them in the order they took slots before
        the next poll completes each: so host room one needs may go to another first."""
        asked = [p for p in prefetches if p.hit is None and not self._delayed(p, "exists")]
        for prefetch in asked:
            self._query(prefetch)
        for prefetch in asked:
            self._allocate(prefetch)
        taken = sorted((p for p in prefetches if self.ongoing.get(p.rid) is p and p.rows is not None and not p.read),
                       key=lambda p: p.taken)
        read = [p for p in taken if not self._delayed(p, "get")]
        for prefetch in read:
            self._read(prefetch)
        for prefetch in read:
            self._complete(prefetch)  # the read's ack

    def _query(self, prefetch: Prefetch) -> None:
        """The storage hit query: how many of the pages storage holds from the first."""
        ps = self.cache.page_size
        backend = self.tier.backend
        pages = 0 if prefetch.terminated else restorable_pages(backend, prefetch.hashes, prefetch.stagings)
        prefetch.hit = pages * ps
        prefetch.hashes = prefetch.hashes[:pages]
        requested = len(prefetch.key)
        self.outcomes["l3_demand_requests"] += 1
        self.outcomes["l1l2_miss_tokens"] += requested
        self.outcomes["l3_miss_tokens"] += requested - min(prefetch.hit, requested)
        where = f" (with {', '.join(s.name for s in prefetch.stagings)} at its end)" if prefetch.stagings else ""
        self._emit(prefetch, "queried", prefetch.hit, f"storage holds {prefetch.hit} of {requested} tokens{where}")

    def _allocate(self, prefetch: Prefetch) -> bool:
        """Host slots for the hit (one host eviction, then what is free, in whole pages,
        if that reaches the threshold); False when the prefetch was revoked instead."""
        hit, ps = prefetch.hit, self.cache.page_size
        if prefetch.terminated or hit < self.threshold:
            self.outcomes["revoked_insufficient" if hit else "revoked_full_miss"] += 1
            self._revoke(prefetch, f"below_threshold: storage holds {hit} tokens of it, under prefetch_threshold "
                                   f"{self.threshold}" if not prefetch.terminated else "cut by the admission poll")
            return False
        host = self.cache.host
        pool = host.kv.allocator
        if pool.available_size() < hit:
            host.evict_host(hit)
        take = hit if pool.available_size() >= hit else min(hit, pool.available_size() // ps * ps)
        if take < self.threshold:
            self._revoke(prefetch, f"host_capacity: {take} tokens of host room after a host eviction, under "
                                   f"prefetch_threshold {self.threshold}")
            return False
        rows = pool.alloc(take)
        if prefetch.stagings and not allocate(host, prefetch.stagings, hit // ps):
            pool.free(rows, trusted=True)
            self._revoke(prefetch, "host_capacity: no host room for the "
                         + " and ".join(s.name for s in prefetch.stagings) + " staging after a host eviction")
            return False
        prefetch.rows = rows
        self.allocations += 1
        prefetch.taken = self.allocations
        prefetch.hit = take
        prefetch.hashes = prefetch.hashes[: take // ps]
        self.cache.metrics.add("storage_hit_tokens", take)
        return True

    def _read(self, prefetch: Prefetch) -> None:
        """Read the pages into the host slots, 128 pages a batch; the first page that
        does not come back ends the read (the pages before it are kept)."""
        ps, rows = self.cache.page_size, self.cache.host.kv.buffer.data
        backend = self.tier.backend
        done = 0
        for start in range(0, len(prefetch.hashes), BATCH_PAGES):
            batch = prefetch.hashes[start : start + BATCH_PAGES]
            for page in backend.get(batch):
                if page is None or len(page) != ps * 8:
                    break
                slots = prefetch.rows[done * ps : (done + 1) * ps]
                rows[slots] = torch.frombuffer(bytearray(page), dtype=torch.int64).to(rows.device)
                done += 1
            if done < start + len(batch):
                break
        prefetch.completed = done * ps
        prefetch.read = True
        if prefetch.stagings and done == len(prefetch.hashes):  # the trailing pools only after all the KV
            read(self.cache.host, backend, prefetch.stagings, prefetch.hashes)

    # ---- ending --------------------------------------------------------------------
    def check_prefetch_progress(self, rid: str) -> bool:
        """The admission poll: True when the request may go on (its prefetch ended now
        or before, or it had none); False while the stop policy waits."""
        prefetch = self.ongoing.get(rid)
        if prefetch is None:
            return True
        if not prefetch.read:
            if self.policy == "wait_complete":
                return False
            if self.policy == "timeout":
                if prefetch.blocked_since is None:
                    prefetch.blocked_since = self.flushes
                pages = len(prefetch.key) // self.cache.page_size
                if self.flushes - prefetch.blocked_since <= self.timeout_base + pages * self.timeout_per_page:
                    return False
                prefetch.deadline = True
            prefetch.terminated = True
        if prefetch.rows is None:
            self._revoke(prefetch, "deadline: its timeout passed before the hit query took host slots" if prefetch.deadline
                         else f"{self.policy}: the admission poll came before the hit query took host slots, "
                         "so nothing had arrived")
        else:
            self._complete(prefetch)
        return True

    def _complete(self, prefetch: Prefetch) -> None:
        """Place what was read below the anchor; free every host slot the tree does not keep."""
        tree, host = self.cache.tree, self.cache.host
        done = prefetch.completed
        if prefetch.stagings:  # all or nothing: every page of the KV and of each pool
            short = shortfall(prefetch.stagings) if done == len(prefetch.hashes) * self.cache.page_size \
                else f"KV read {done} of {prefetch.hit} tokens"
            if short:
                host.kv.free(prefetch.rows)
                release(host, prefetch.stagings)
                cut = "deadline" if prefetch.deadline else "storage_transfer"
                self._end(prefetch, 0, f"discarded ({cut}), all or nothing: {short}")
                return
        placed = tree.insert_host(prefetch.anchor, prefetch.key[:done], prefetch.rows[:done])
        kept = []
        if placed.dropped:
            host.kv.free(prefetch.rows)
            release(host, prefetch.stagings)
            loaded = 0
        else:
            host.kv.free(prefetch.rows[: placed.prefix_len])
            if prefetch.rows.shape[0] > done:
                host.kv.free(prefetch.rows[done:])
            kept = commit(host, prefetch.stagings, prefetch.anchor, placed.node, done)
            loaded = done - placed.prefix_len
        self.cache.metrics.add("prefetched_tokens", loaded)
        what = "dropped: below a node with no host copy" if placed.dropped else f"{loaded} tokens on the host"
        if kept:
            what += f", with {' and '.join(kept)}"
        self._end(prefetch, loaded, f"done: {done} read, {what}")

    def _revoke(self, prefetch: Prefetch, reason: str) -> None:
        if prefetch.rows is not None:
            self.cache.host.kv.free(prefetch.rows)
        release(self.cache.host, prefetch.stagings)
        self._end(prefetch, 0, f"revoked, {reason}")

    def _end(self, prefetch: Prefetch, loaded: int, detail: str) -> None:
        """Release the anchor's host lock, on the anchor and the parts split off above it
        since (v0.5.23 releases up to the lock's boundary, which a split moves up)."""
        tree = self.cache.tree
        if prefetch.receipts is not None and tree.nodes.get(prefetch.anchor.id) is prefetch.anchor:
            tree.unlock_aux_host(prefetch.anchor, prefetch.receipts)
        tree.release_marked_host_lock(prefetch.anchor, PREFETCH_MARK, prefetch.rid)
        del self.ongoing[prefetch.rid]
        self.occupied -= len(prefetch.key)
        self.loaded[prefetch.rid] = loaded
        self._emit(prefetch, "ended", loaded, detail)

    def pop_prefetch_loaded_tokens(self, rid: str) -> int:
        return self.loaded.pop(rid, 0)

    def view(self) -> tuple[tuple[str, int, int, str], ...]:
        """(request id, anchor node id, tokens asked, stage) per prefetch in flight."""
        return tuple((p.rid, p.anchor.id, len(p.key), _stage(p)) for p in self.ongoing.values())

    # ---- what the invariants read ----------------------------------------------------
    def rows_held(self, name: str = FULL) -> int:
        """Host slots of ``name``'s pool taken for hits the tree does not hold yet."""
        if name == FULL:
            return sum(int(p.rows.shape[0]) for p in self.ongoing.values() if p.rows is not None)
        return sum(int(s.slots.shape[0]) for p in self.ongoing.values() for s in p.stagings
                   if s.name == name and s.slots is not None)


    def check(self) -> list[str]:
        """What is wrong with the prefetches in flight, in words (the invariant checker's)."""
        tree, problems = self.cache.tree, []
        if self.occupied != sum(len(p.key) for p in self.ongoing.values()):
            problems.append(f"prefetch budget holds {self.occupied} tokens, the prefetches in flight ask "
                            f"{sum(len(p.key) for p in self.ongoing.values())}")
        for p in self.ongoing.values():
            if p.anchor is not tree.root and (tree.nodes.get(p.anchor.id) is not p.anchor
                                              or p.anchor.data[0].host_value is None
                                              or p.rid not in p.anchor.data[0].metadata.get(PREFETCH_MARK, ())):
                problems.append(f"prefetch {p.rid}'s anchor node {p.anchor.id} left the tree, its host copy or its mark")
            if p.rows is not None and (p.hit != p.rows.shape[0] or len(p.hashes) * self.cache.page_size != p.hit):
                problems.append(f"prefetch {p.rid} holds {p.rows.shape[0]} host slots for a {p.hit}-token hit")
        live = set(self.ongoing)
        for node in tree.nodes.values():
            stale = [rid for rid in node.data[0].metadata.get(PREFETCH_MARK, ()) if rid not in live]
            if stale:
                problems.append(f"node {node.id} is marked by prefetch {stale[0]}, no longer in flight")
        return problems

    def _emit(self, prefetch: Prefetch, stage: str, tokens: int, detail: str) -> None:
        self._note(prefetch.rid, prefetch.anchor, tokens, f"prefetch {stage} (storage -> host): {detail}")

    def _note(self, rid: str, anchor: TreeNode, tokens: int, detail: str) -> None:
        events = self.cache.events
        if events.enabled:
            with events.for_request(rid):
                events.emit(EventKind.TRANSFER, FULL, anchor.id, Cause.REQUEST, tokens, detail)


def _stage(prefetch: Prefetch) -> str:
    stage = "querying" if prefetch.hit is None else "reading" if not prefetch.read else "read"
    if prefetch.stagings:  # the trailing pools it stages, all or nothing (staging.py)
        stage += ", with " + " and ".join(s.name for s in prefetch.stagings)
    return stage
