"""Faults in keys: EAGLE's bigram keys (CacheConfig.is_eagle). Each lives under the
is_eagle option (``Fault.options``), so the fuzzer searches it with bigram keys on."""

from __future__ import annotations

from . import Fault, fired

# ---- 1. sglang#10846: the cached length measured on raw tokens, not pairs ---------------------

EAGLE_TAIL_SLOT_LEAKED = "eagle-tail-slot-leaked"


def _install_eagle_tail_slot_leaked(cache) -> None:
    """Before PR #10846, cache_finished_req aligned the request's slots on their raw
    count (``len(kv_indices) // page_size * page_size``) while the bigram key it
    inserted holds one unit fewer: the tree adopted the pairs' slots, and the slot of
    the last token (at page 1; the page past the pairs' last whole page above it) was
    counted as cached by the request yet held by nobody, so it leaked. The faulty copy,
    after the correct checkpoint, drops those slots from the request's row without
    freeing them."""
    correct = cache._checkpoint
    ps = cache.page_size

    def checkpoint(req, finished, up_to):
        correct(req, finished, up_to)
        if not cache.bigram_keys or req.last_node == cache.tree.root.id:
            return
        pairs = req.cache_protected_len
        raw = min(up_to, int(req.kv_indices.shape[0]))
        raw -= raw % ps
        if raw > pairs:
            fired(cache, EAGLE_TAIL_SLOT_LEAKED)
            req.kv_indices = req.kv_indices[:pairs].new_tensor(
                req.kv_indices[:pairs].tolist() + req.kv_indices[raw:].tolist())

    cache._checkpoint = checkpoint


# ---- 2. sglang#34870: SWA's eviction frontier sized on the token count, not the key --------------

EAGLE_SWA_FRONTIER_ON_TOKENS = "eagle-swa-frontier-on-tokens"


def _install_eagle_swa_frontier_on_tokens(cache) -> None:
    """Before PR #34870 (which fixed the crash #34823 had gated off), a checkpoint's
    eager out-of-window free was given the request's token count, while the bigram key
    it inserts holds one unit fewer and 0.5.23 passes ``len(key) - 1``: when the token
    count is a page multiple the frontier lands a page too high, the new leaf (which
    stops at page_floor(len(key))) keeps less than a window of live SWA, and the match
    that should end on it stops short. The faulty copy frees up to the token count's
    frontier."""
    swa = cache.by_name["swa"]
    correct = swa.free_out_of_window_slots

    def free_out_of_window_slots(req, pre_len, params):
        if cache.bigram_keys and swa.frees_out_of_window:
            tokens = pre_len + 2  # the key is one unit shorter than the tokens, and 0.5.23 passes len(key) - 1
            right, wrong = swa.window_floor(req, pre_len), swa.window_floor(req, tokens)
            if wrong is not None and wrong != right and wrong > max(req.swa_evicted_seqlen, req.cache_protected_len):
                fired(cache, EAGLE_SWA_FRONTIER_ON_TOKENS)
            pre_len = tokens
        correct(req, pre_len, params)

    swa.free_out_of_window_slots = free_out_of_window_slots


FAULTS = (
    Fault(EAGLE_TAIL_SLOT_LEAKED, "sgl-project/sglang#10846", ("full",),
          "with EAGLE keys a checkpoint aligns the request's slots on its raw token count, one more than the pairs "
          "the tree adopts: the last token's slot leaks", _install_eagle_tail_slot_leaked,
          options=(("is_eagle", True),)),
    Fault(EAGLE_SWA_FRONTIER_ON_TOKENS, "sgl-project/sglang#34870", ("full", "swa"),
          "with EAGLE keys a checkpoint's eager SWA free is given the token count, not len(key) - 1: the "
          "frontier lands a page too high, the new leaf keeps less than a window and the next match stops short",
          _install_eagle_swa_frontier_on_tokens, options=(("is_eagle", True),)),
)
