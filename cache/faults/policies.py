"""Faults in the eviction policies (evict_policy.py): what a policy reads going wrong,
and the walk's heap. Each lives under a policy other than lru (``Fault.options``): under
lru both behave as the correct code. A wrong victim breaks no invariant of the tree; the
eviction audit (tree_core.audit_full_victim) names a victim out of the policy's order,
a scenario's expectations name wrong counts, and so does the bridge (hit counts and
Full's eviction order are compared with SGLang's)."""

from __future__ import annotations

import heapq

from . import Fault, fired

# ---- 1. sglang#18843: inserts never count a hit ----------------------------------------------

HIT_COUNT_NEVER_COUNTED = "hit-count-never-counted"


def _install_hit_count_never_counted(cache) -> None:
    """PR #18843 (SLRU, and "fix RadixCache hit_count bug"): the radix cache never
    incremented ``hit_count``, so LFU ordered by access time alone and SLRU kept every
    leaf probationary; 0.5.23 counts a hit per insert through a node past what the
    request already inserted. The faulty copy runs the correct insert, then puts every
    count back to 0."""
    tree = cache.tree
    correct = tree.insert

    def insert(params, apply_actions):
        result = correct(params, apply_actions)
        counted = [node for node in tree.nodes.values() if node.hit_count]
        if counted:
            fired(cache, HIT_COUNT_NEVER_COUNTED)
            for node in counted:
                node.hit_count = 0
        return result

    tree.insert = insert


# ---- 2. sglang-omni#1724: one heap kept across eviction walks --------------------------------

HEAP_KEPT_ACROSS_WALKS = "policy-heap-kept-across-walks"


def _install_heap_kept_across_walks(cache) -> None:
    """Review of sglang-omni PR #1724 (a persistent lazy eviction heap): repairing a
    stale key when it pops keeps LRU's order only because access times only grow. Under
    MRU a touch makes a leaf *more* urgent; its old entry stays buried and another leaf
    pops first with a still-valid key. 0.5.23 builds the heap afresh per walk. The
    faulty copy keeps one heap across walks, keyed when a leaf first joins it,
    re-keying an entry only when it pops."""
    full = cache.components[0]
    heap: list = []
    queued: set[int] = set()
    correct_start, correct_next = full.evict_start, full.evict_next

    def evict_start(request: int) -> None:
        correct_start(request)
        if full._walk_heap is None:
            return  # lru: the tree's own persistent heap, which is right for it
        for node in cache.tree.leaves:
            if node.id not in queued:
                queued.add(node.id)
                heapq.heappush(heap, full.heap_entry(node))

    def evict_next(batch):
        if full._walk_heap is None:
            return correct_next(batch)
        last = full._last_victim
        if last is not None and last.parent is not None and last.parent.in_leaf_set and last.parent.id not in queued:
            queued.add(last.parent.id)
            heapq.heappush(heap, full.heap_entry(last.parent))
        full._last_victim = None
        while batch.counts["full"] < full._evict_request and heap:
            entry = heapq.heappop(heap)
            node = entry[-1]
            if not node.in_leaf_set or cache.tree.nodes.get(node.id) is not node:
                queued.discard(node.id)
                continue
            fresh = full.heap_entry(node)
            if fresh[:-1] != entry[:-1]:  # a stale key, found only now: back in with the new one
                heapq.heappush(heap, fresh)
                continue
            queued.discard(node.id)
            if min(full.heap_entry(n) for n in cache.tree.leaves)[-1] is not node:
                fired(cache, HEAP_KEPT_ACROSS_WALKS)
            full._last_victim = node
            return node, True
        return None, False

    full.evict_start, full.evict_next = evict_start, evict_next


FAULTS = (
    Fault(HIT_COUNT_NEVER_COUNTED, "sgl-project/sglang#18843", ("full",),
          "inserts never count a hit: every hit_count stays 0, so lfu evicts by access time alone and slru keeps "
          "every leaf probationary", _install_hit_count_never_counted, options=(("eviction_policy", "lfu"),)),
    Fault(HEAP_KEPT_ACROSS_WALKS, "sgl-project/sglang-omni#1724", ("full",),
          "Full's eviction heap is kept across walks, each key repaired only when it pops: under mru a leaf touched "
          "since it was queued stays buried and an older one is evicted first",
          _install_heap_kept_across_walks, options=(("eviction_policy", "mru"),)),
)
