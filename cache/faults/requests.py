"""Faults in the request flows around retraction and abort (see the package docstring
for the rules): each installer wraps one controller method of one cache instance."""

from __future__ import annotations

from . import Fault, fired

# ---- 1. sglang#4977: retract frees the row from the checkpoint length rounded up -------------

RETRACT_PADS_UNALIGNED_PREFIX = "retract-pads-unaligned-prefix"
_CHECKPOINTED = "fault:checkpointed_len"


def _install_retract_pads_unaligned_prefix(cache) -> None:
    """Before PR #4977, retract_decode freed ``req_to_token[ceil_align(len(prefix_indices)):
    seqlen]``. After ``cache_unfinished_req`` the prefix length is what the request had
    computed (unaligned) while the tree keeps only whole pages: the page holding that
    boundary was the request's own, and rounding up skipped it, so it leaked. The faulty
    copy records the length each checkpoint saw and, at retraction, lets the request's
    own part start at that length rounded up to a page."""
    from ..basics.keys import ceil_align

    checkpoint, retract = cache.checkpoint, cache.retract
    ps = cache.page_size

    def faulty_checkpoint(req, *args, **kwargs):
        req.component_state[_CHECKPOINTED] = req.kv_len
        return checkpoint(req, *args, **kwargs)

    def faulty_retract(req, *args, **kwargs):
        seen = req.component_state.get(_CHECKPOINTED)
        if seen is not None and seen % ps and cache.requests.get(req.rid) is req and not req.is_chunked:
            padded = min(ceil_align(seen, ps), req.kv_len)
            if padded > req.cache_protected_len:
                fired(cache, RETRACT_PADS_UNALIGNED_PREFIX)
                req.cache_protected_len = padded  # the free starts here: the page below is skipped
        return retract(req, *args, **kwargs)

    cache.checkpoint, cache.retract = faulty_checkpoint, faulty_retract


# ---- 2. sglang#18701: aborting a retracted request keeps its backup -------------------------

ABORT_RETRACTED_KEEPS_BACKUP = "abort-retracted-keeps-backup"


def _install_abort_retracted_keeps_backup(cache) -> None:
    """Issue #18701 (fixed by PR #18705; 0.5.23 calls discard_kv_cache_backup at
    scheduler.py's abort of the retracted queue): a retracted request aborted by the
    client was dropped, but its KV copy on the host (then req.kv_cache_cpu) was never
    freed. The faulty copy forgets the backup before the abort, so its host slots stay
    taken with nothing holding them."""
    abort = cache.abort

    def faulty_abort(req):
        if cache.retracted.get(req.rid) is req and req.retraction_backup is not None:
            fired(cache, ABORT_RETRACTED_KEEPS_BACKUP)
            req.retraction_backup = None
        return abort(req)

    cache.abort = faulty_abort


# ---- 3. sglang#38941: the KV past a stop is freed from the stop, not its next page ----------

STOP_TAIL_FROM_STOP = "stop-tail-freed-from-the-stop"


def _install_stop_tail_from_stop(cache) -> None:
    """A finished request's KV goes back in two pieces: its row past the tree's part up
    to the stop, then the KV past the stop (SGLang's _release_overallocated_kv_indices).
    A paged free releases every page it touches, so the second piece must start at the
    next page boundary; PR #38941 fixed a seam that fell inside one page, where the
    second piece freed a page the first had already released (a double free, or with
    the shared-page assert, a crashed scheduler). The faulty copy starts the second
    piece at the stop itself."""
    correct = cache._past_stop

    def past_stop(owned: int, protected: int) -> int:
        start = correct(owned, protected)
        if owned % cache.page_size and owned >= protected and start != owned:
            fired(cache, STOP_TAIL_FROM_STOP)
            return owned
        return start

    cache._past_stop = past_stop


# ---- 4. sglang-jax#984: aborting a request in chunked prefill never releases it --------------

ABORT_CHUNKED_NOT_RELEASED = "abort-chunked-not-released"


def _install_abort_chunked_not_released(cache) -> None:
    """The scheduler's abort only marked running requests (to_finish = FINISH_ABORT) and
    never looked at the request in chunked prefill: it left the scheduler still holding
    its row, its KV and its lock, and the idle memory check found the leak
    (sgl-project/sglang-jax#984; sgl-project/sglang#36926 is the same leak for an aborted
    disaggregated prefill). The faulty copy drops a chunked request without releasing it."""
    correct = cache.abort

    def abort(req):
        if cache.requests.get(req.rid) is req and req.is_chunked:
            fired(cache, ABORT_CHUNKED_NOT_RELEASED)
            with cache.events.op("abort", request=req.rid):
                cache.requests.pop(req.rid)
                req.released = True
            return "chunked"
        return correct(req)

    cache.abort = abort


FAULTS = (
    Fault(RETRACT_PADS_UNALIGNED_PREFIX, "sgl-project/sglang#4977", ("full",),
          "a retraction after an unaligned checkpoint frees the row from the checkpoint length rounded up to a page: "
          "the page below leaks", _install_retract_pads_unaligned_prefix),
    Fault(ABORT_RETRACTED_KEEPS_BACKUP, "sgl-project/sglang#18701", ("full",),
          "aborting a retracted request drops it but not its host backup: the host slots leak",
          _install_abort_retracted_keeps_backup, host_tier=True),
    Fault(STOP_TAIL_FROM_STOP, "sgl-project/sglang#38941", ("full",),
          "a release with a stop mid-page frees the KV past the stop from the stop itself: the page holding the stop "
          "is freed twice", _install_stop_tail_from_stop),
    Fault(ABORT_CHUNKED_NOT_RELEASED, "sgl-project/sglang-jax#984", ("full",),
          "aborting a request in chunked prefill drops it without releasing it: its row, KV and lock leak",
          _install_abort_chunked_not_released),
)
