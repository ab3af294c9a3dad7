"""Faults in the prefetch from storage (cache/tiers/prefetch.py, the tree side in
tree_core_prefetch.py). Each lives in the storage tier (``Fault.storage``: the stop
policy the fuzzer searches it under, on its storage configs) and needs
``hicache.storage`` in the config: installing one on a cache without it is an error."""

from __future__ import annotations

from . import Fault, fired


def _prefetch(cache, name: str):
    storage = None if cache.host is None else cache.host.storage
    if storage is None:
        raise ValueError(f"fault {name!r} needs the storage tier (hicache.storage)")
    return storage.prefetch


# ---- 1. sglang#9927: the admission poll pops an unfinished prefetch and never puts it back ---------

POLL_DROPS_UNFINISHED = "prefetch-poll-drops-unfinished"


def _install_poll_drops_unfinished(cache) -> None:
    """HiRadixCache before PR #9927: ``check_prefetch_progress`` popped the request's
    ``ongoing_prefetch`` entry before asking whether the prefetch could end. A poll that
    found it unfinished (wait_complete, or timeout before its deadline) returned "wait"
    with the entry already gone, so nothing ever ended that prefetch: its anchor kept
    its host protection, its host slots stayed taken and its tokens stayed in
    ``prefetch_tokens_occupied`` — every such prefetch leaked, and the rate limit soon
    declined all new ones. (0.5.23 keeps the entry until the prefetch ends.) The faulty
    copy runs the correct poll and, when it says wait, drops the prefetch from those in
    flight without releasing anything."""
    prefetch = _prefetch(cache, POLL_DROPS_UNFINISHED)
    correct = prefetch.check_prefetch_progress

    def check_prefetch_progress(rid: str) -> bool:
        in_flight = rid in prefetch.ongoing
        done = correct(rid)
        if in_flight and not done:
            fired(cache, POLL_DROPS_UNFINISHED)
            del prefetch.ongoing[rid]  # popped before the check, never put back
        return done

    prefetch.check_prefetch_progress = check_prefetch_progress


# ---- 2. sglang#9601: a prefetch anchored at a node with no host copy --------------------------------

ANCHOR_NOT_BACKED_UP = "prefetch-anchor-not-backed-up"


def _anchor_anyway(cache, name: str, prefetch) -> None:
    """Patch ``prefetch.prefetch_from_storage`` to anchor at the match's last node even
    when it has no host copy (the correct code declines: anchor_not_backed_up)."""
    tree = cache.tree
    correct = prefetch.prefetch_from_storage

    def prefetch_from_storage(rid, key):
        issue = correct(rid, key)
        if issue.reason != "anchor_not_backed_up":
            return issue
        fired(cache, name)
        from ..basics.params import MatchPrefixParams

        anchor = tree.node_by_id(cache.match_prefix(MatchPrefixParams(key)).last_host_node)
        backed_up = tree.backed_up
        tree.backed_up = lambda node: node is anchor or backed_up(node)
        try:
            return correct(rid, key)
        finally:
            del tree.backed_up  # the class's again

    prefetch.prefetch_from_storage = prefetch_from_storage


def _install_anchor_not_backed_up(cache) -> None:
    """HiRadixCache before PR #9601: a prefetch was anchored at the match's last node
    (``last_host_node``) whatever it was, and that could be a device-only node, never
    backed up. Device eviction deletes such a node from the tree, prefetch in flight or
    not, so the pages fetched for it were left with nowhere to go: host memory leaked.
    0.5.23 anchors only at the root or a node with a host copy and declines the prefetch
    otherwise (``anchor_not_backed_up``). The faulty copy issues it anyway, host-locking
    a node that has no host copy."""
    _anchor_anyway(cache, ANCHOR_NOT_BACKED_UP, _prefetch(cache, ANCHOR_NOT_BACKED_UP))


# ---- 3. sglang#31902: the fetched pages hang below a node that is not backed up ----------------------

REFILL_UNDER_UNBACKED = "prefetch-refill-under-unbacked-parent"


def _install_refill_under_unbacked(cache) -> None:
    """The unified tree before PR #31902: ``_insert_helper_host`` hung the fetched pages
    as a new host node below the prefetch's anchor without looking at it, and the anchor
    was often a device-only node (its write-through backup had not run yet). Under
    write-through that breaks the rule that a host copy's parent has one too: the
    device-only parent then looks like a device leaf, gets evicted as one, and is
    deleted with a child below it (the non-leaf eviction assert of PR #30106). 0.5.23
    drops such a refill (``host_insert_dropped``) and declines such an anchor at issue.
    The faulty copy does neither: it anchors anyway (as ``prefetch-anchor-not-backed-up``)
    and hangs the pages below the anchor where the correct walk drops them."""
    prefetch = _prefetch(cache, REFILL_UNDER_UNBACKED)
    _anchor_anyway(cache, REFILL_UNDER_UNBACKED, prefetch)
    tree = cache.tree
    correct = tree.insert_host

    def insert_host(anchor, key, host_rows):
        placed = correct(anchor, key, host_rows)
        if not placed.dropped:
            return placed
        fired(cache, REFILL_UNDER_UNBACKED)
        # dropped: nothing below the anchor matched, and the anchor has no host copy
        tail = tree._add_host_only_leaf(anchor, key.data, key.namespace, host_rows)
        return placed._replace(prefix_len=0, node=tail, dropped=False)

    tree.insert_host = insert_host


# ---- 4. sglang#27291: the prefetch asks storage for the whole input, past the prefix limit -----------

PAST_PREFIX_LIMIT = "prefetch-past-the-prefix-limit"


def _install_past_prefix_limit(cache) -> None:
    """The scheduler before PR #27291: ``_prefetch_kvcache`` asked storage for every
    token after the match, while the request's own match stops one token short of its
    input (the last token is computed for its logprob), page-aligned a page earlier when
    the input is whole pages. With SWA the prefetch then staged the window ending at the
    input's end, the match needed the one ending a page before, and found SWA missing
    there: the prefetched tokens were a cache miss. 0.5.23 ends the prefetch at the
    prefix limit (``_compute_max_prefix_len``). The faulty copy asks up to the end."""
    prefetch = _prefetch(cache, PAST_PREFIX_LIMIT)

    def prefix_limit(key) -> int:
        if len(key) % cache.page_size == 0 and len(key):
            fired(cache, PAST_PREFIX_LIMIT)  # a whole page more than the request's match can use
        return len(key)

    prefetch.prefix_limit = prefix_limit


FAULTS = (
    Fault(POLL_DROPS_UNFINISHED, "sgl-project/sglang#9927", ("full",),
          "a poll that finds a prefetch unfinished drops it from those in flight: its anchor lock, host slots and "
          "rate-limit budget are never released", _install_poll_drops_unfinished, storage="wait_complete"),
    Fault(ANCHOR_NOT_BACKED_UP, "sgl-project/sglang#9601", ("full",),
          "a prefetch is anchored at the match's last node even when it has no host copy (device eviction may "
          "delete it under the prefetch)", _install_anchor_not_backed_up, storage="best_effort"),
    Fault(REFILL_UNDER_UNBACKED, "sgl-project/sglang#31902", ("full",),
          "fetched pages hang as a host node below a node with no host copy under write-through (and such an "
          "anchor is not declined)", _install_refill_under_unbacked, storage="best_effort"),
    Fault(PAST_PREFIX_LIMIT, "sgl-project/sglang#27291", ("full",),
          "a prefetch asks storage for the whole input, past the request's prefix limit (its input less one token): "
          "with SWA the window fetched is not the one the request's match needs", _install_past_prefix_limit,
          storage="best_effort"),
)
