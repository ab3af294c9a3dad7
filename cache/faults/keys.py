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


FAULTS = (
    Fault(EAGLE_TAIL_SLOT_LEAKED, "sgl-project/sglang#10846", ("full",),
          "with EAGLE keys a checkpoint aligns the request's slots on its raw token count, one more than the pairs "
          "the tree adopts: the last token's slot leaks", _install_eagle_tail_slot_leaked,
          options=(("is_eagle", True),)),
)
