"""SGLang 0.5.23's prefetch from storage on the bridge's SGLang side (sglang_storage.py
builds the storage tier it reads from).

The ops call what the scheduler calls: ``prefetch`` matches the key and, when the
match's last host node is backed up (or the root), ``prefetch_from_storage`` for the
tokens after the match; ``prefetch_progress`` is ``check_prefetch_progress`` then
``pop_prefetch_loaded_tokens``; ``storage_hit`` is ``query_storage_hit_length`` after a
match. Each issue gets a fresh request handle, so an id may be prefetched again.

SGLang's prefetch stages run on three never-started threads; ``run`` runs their loop
bodies in the order one flush of ours moves a prefetch: the hit queries, the poll
that takes host slots, the reads with their acks, the poll that completes them. The
``timeout`` policy's wall clock is replaced by ours, counted in flushes from the first
admission poll that found the prefetch unfinished. A scenario's scripted delays
(``hicache.storage.inject`` rules with ``outcome = "delay"``) hold a hit query or a read
back for as many flushes as they hold ours: the same rules answer the same questions
(``delay_of``, asked once per stage of a prefetch, by the same page hashes), where SGLang's
own injector would sleep a random while.

Compared after every state comparison: the prefetches in flight (by request id), the
tokens they hold against the budget, the host locks their anchors hold, and SGLang's
prefetch outcome counters (``_prefetch_outcome_stats``) against ours.
"""

from __future__ import annotations

from array import array
from typing import Optional

from cache.tiers.prefetch import OUTCOMES  # SGLang's _prefetch_outcome_stats names, compared one by one

from .canonical import Difference, node_ident, our_tokens, their_tokens


class PrefetchSide:
    """SGLang's prefetches of one bridge storage tier."""

    def __init__(self, cache, config: dict) -> None:
        storage = config["hicache"]["storage"]
        self.cache = cache
        self.page_size = config.get("page_size", 1)
        self.base = storage.get("prefetch_timeout_base", 1)
        self.per_page = storage.get("prefetch_timeout_per_page", 0.0)
        self.handles: dict = {}  # our request id -> its latest SGLang handle
        self.attempts = 0
        self.flushes = 0
        self.blocked_since: dict = {}  # handle -> flush count at its first unfinished poll
        cache._prefetch_deadline_expired = self._deadline_expired
        from cache.tiers.backends import MemoryBackend, StorageInjector

        delays = [dict(rule) for rule in storage.get("inject", ()) if dict(rule).get("outcome") == "delay"]
        self.delays = StorageInjector(MemoryBackend(), delays) if delays else None
        self.waiting: dict = {}  # (id of operation, stage) -> flushes its delay still holds it
        self.asked: dict = {}  # (id of operation, stage) whose delay was asked -> the operation (kept: ids stay unique)

    # ---- ops -----------------------------------------------------------------------------
    def op_prefetch(self, side, f: dict) -> dict:
        from sglang.srt.mem_cache.base_prefix_cache import CacheRequestHandle

        cache, tokens = self.cache, f["key"]
        rid = f["rid"]
        current = self.handles.get(rid)
        if current is not None and current in cache.ongoing_prefetch:
            return {"issued": False, "prefetch_tokens": 0}
        match = cache.match_prefix(side.sg.MatchPrefixParams(key=side.key(tokens, f.get("extra_key"), f.get("cache_salt"))))
        anchor = match.last_host_node
        if not (cache.is_backuped(anchor) or cache.is_root(anchor)):
            return {"issued": False, "prefetch_tokens": 0}
        start = match.device_prefix_len + match.host_hit_length
        end = max(start, len(tokens) - 1)  # the scheduler's match_end (_compute_max_prefix_len)
        # an EAGLE span of these tokens is one pair fewer (prefetch_from_storage's bigram key)
        span = max(end - start - int(side.is_eagle), 0) // self.page_size * self.page_size
        self.attempts += 1
        handle = CacheRequestHandle(rid, self.attempts)
        self.handles[rid] = handle
        cache.prefetch_from_storage(handle, anchor, array("q", tokens[start:end]), cache.get_last_hash_value(anchor), None,
                                    matched_prefix_tokens=array("q", tokens[:start]), extra_key=f.get("extra_key"),
                                    cache_salt=f.get("cache_salt"))
        return {"issued": handle in cache.ongoing_prefetch, "prefetch_tokens": span}

    def op_progress(self, side, f: dict) -> dict:
        handle = self.handles.get(f["rid"])
        if handle is None:
            return {"done": True, "prefetched": 0}
        done = bool(self.cache.check_prefetch_progress(handle))
        return {"done": done, "prefetched": int(self.cache.pop_prefetch_loaded_tokens(handle)) if done else 0}

    def op_storage_hit(self, side, f: dict) -> dict:
        cache, tokens = self.cache, f["key"]
        match = cache.match_prefix(side.sg.MatchPrefixParams(key=side.key(tokens, f.get("extra_key"), f.get("cache_salt"))))
        anchor = match.last_host_node
        start = match.device_prefix_len + match.host_hit_length
        if not cache.is_root(anchor) and cache.get_last_hash_value(anchor) is None:
            return {"storage_hit_length": 0}
        hit = cache.query_storage_hit_length(anchor, array("q", tokens[start:]), cache.get_last_hash_value(anchor),
                                             extra_key=f.get("extra_key"), cache_salt=f.get("cache_salt"))
        return {"storage_hit_length": int(hit)}

    # ---- the threads, run synchronously ------------------------------------------------------
    def run(self, flush: bool = True) -> None:
        """One flush's worth of prefetch work: hit queries, the allocating poll, the
        reads and their acks, the completing poll. ``flush``: a flush's run (a delay
        counts flushes); else the run after an op with immediate transfers."""
        from sglang.srt.managers.cache_controller import PrefetchAck

        from sglang.srt.mem_cache.utils import get_storage_hash_str

        cache, cc = self.cache, self.cache.cache_controller
        held = []
        while not cc.prefetch_queue.empty():
            op = cc.prefetch_queue.get()
            if op is None:
                continue
            if not op.is_terminated() and self._delayed(
                    op, "exists", lambda: get_storage_hash_str(op.token_ids, op.last_hash, page_size=cc.page_size), flush):
                held.append(op)
                continue
            hashes, hit = ([], 0) if op.is_terminated() else cc._storage_hit_query(op)
            hit = cc._sync_prefetch_hit_query(op, hit)
            op.hash_value, op.storage_hit_count = hashes[: hit // cc.page_size], hit
            cc.prefetch_hit_queue.put(op)
        for op in held:
            cc.prefetch_queue.put(op)
        cache.check_hicache_events()
        held = []
        while not cc.prefetch_buffer.empty():
            op = cc.prefetch_buffer.get()
            if op is None:
                continue
            if not op.is_terminated() and self._delayed(op, "get", lambda: list(op.hash_value), flush):
                held.append(op)
                continue
            try:
                cc._page_transfer(op)
            finally:
                cc.prefetch_sync_queue.put(PrefetchAck(rid=op.request_id, completed_req=True, operation=op))
        for op in held:
            cc.prefetch_buffer.put(op)
        while not cc.prefetch_sync_queue.empty():
            ack = cc.prefetch_sync_queue.get()
            if ack is not None:
                cc._reduce_prefetch_ack(ack)
                cc.ack_prefetch_queue.put(ack)
        cache.check_hicache_events()
        # The slots a completion gives back wait in SGLang's release queues for the next
        # poll, which a scheduler runs before its next allocation; ours frees them at the
        # completion. Drain just those queues, so the pools compare at once.
        cache._drain_storage_control_queues_impl(
            n_storage_hit=0, n_ack_prefetch=0, n_backup=0, n_release=None,
            extra_release_counts={name: None for name in getattr(cc, "extra_host_mem_release_queues", {})},
            log_metrics=False)

    def flushed(self) -> None:
        self.flushes += 1

    def _delayed(self, op, stage: str, keys, flush: bool) -> bool:
        """Whether a scripted delay still holds ``op``'s ``stage`` (ours: StoragePrefetch._delayed;
        only a flush counts down)."""
        if self.delays is None:
            return False
        token = (id(op), stage)
        if token in self.waiting:
            if not flush:
                return True
            self.waiting[token] -= 1
            if self.waiting[token] > 0:
                return True
            del self.waiting[token]
            return False
        if token not in self.asked:
            self.asked[token] = op
            wait = self.delays.delay_of(stage, keys())
            if wait:
                self.waiting[token] = wait
                return True
        return False

    def _deadline_expired(self, operation) -> bool:
        """Ours: flushes since the first unfinished poll past base + pages × per page
        (a prefetch whose pages all landed never times out, as SGLang's)."""
        if operation.host_indices is not None and operation.completed_tokens >= len(operation.hash_value) * self.page_size:
            return False
        since = self.blocked_since.setdefault(operation.handle, self.flushes)
        pages = operation.stats_requested_tokens // self.page_size
        return self.flushes - since > self.base + pages * self.per_page

    # ---- state ---------------------------------------------------------------------------------
    def difference(self, ours_cache) -> Optional[Difference]:
        from cache.basics.keys import namespace_parts

        prefetch, tree = ours_cache.host.storage.prefetch, ours_cache.tree
        cache = self.cache
        theirs = sorted(h.rid for h in cache.ongoing_prefetch)
        if sorted(prefetch.ongoing) != theirs:
            return Difference("storage.prefetches", sorted(prefetch.ongoing), theirs)
        occupied = cache.cache_controller.prefetch_tokens_occupied
        if prefetch.occupied != occupied:
            return Difference("storage.prefetch_occupied", prefetch.occupied, occupied)
        core = cache.tree_core
        ours_anchors = sorted(node_ident(namespace_parts(p.anchor.namespace).extra_key, p.anchor, tree.root,
                                     our_tokens(tree.root)) for p in prefetch.ongoing.values())
        their_anchors = sorted(_their_ident(core, info[0]) for info in cache.ongoing_prefetch.values())
        if ours_anchors != their_anchors:
            return Difference("storage.prefetch_anchors", len(ours_anchors), len(their_anchors))
        stats = cache.prefetch_outcome_stats_snapshot()
        for name in OUTCOMES:
            if prefetch.outcomes.get(name, 0) != int(stats.get(name, 0)):
                return Difference(f"storage.prefetch_outcomes.{name}", prefetch.outcomes.get(name, 0), int(stats.get(name, 0)))
        return None


def _their_ident(core, node_id) -> tuple:
    node = core.node_by_id(node_id)
    extra_key = None if node is core.root_node else node.key.extra_key
    return node_ident(extra_key, node, core.root_node, their_tokens(core.root_node))
