"""Faults in sessions: the session radix cache's tags (session_refs.py) and streaming
sessions' slots (streaming_session.py, session_controller.py). Each installer wraps one
method of one cache instance (or of its ``SessionRefTracker``) and needs sessions on:
their ``Fault.sessions`` makes the fuzzer search them with the session ops drawn."""

from __future__ import annotations

from . import Fault, fired

# ---- 1. sglang#29173: a finish after the close tags the closed session again ------------------

LATE_FINISH_RETAGS_CLOSED = "late-finish-retags-closed-session"


def _install_late_finish_retags_closed(cache) -> None:
    """Review of PR #29173: a session closed while one of its requests still ran was
    tagged again when that request finished (its insert registered the session's ref
    and recreated its frontier), so the closed session pinned KV no close would ever
    let go. SGLang 0.5.23 remembers closes (a bounded tombstone set) and skips a
    finish whose session was closed or whose generation is stale. The faulty copy
    registers a finish of a closed session as if it were open."""
    refs = cache.session_refs
    correct = refs.register_session_ref

    def register_session_ref(req, leaf) -> bool:
        sid = req.session_id
        if (refs.enabled and sid is not None and sid in refs.closed and not req.session_streaming
                and leaf is not refs.tree.root):
            fired(cache, LATE_FINISH_RETAGS_CLOSED)
            for index in refs.by_component.values():
                index.register(sid, index.reusable_ancestor(leaf))
            return True
        return correct(req, leaf)

    refs.register_session_ref = register_session_ref


# ---- 2. sglang#27058: a close takes the other sessions' tags off a shared prefix --------------

CLOSE_DROPS_SHARED_PREFIX_REFS = "close-drops-shared-prefix-refs"


def _install_close_drops_shared_prefix_refs(cache) -> None:
    """PR #27058 (the first session radix cache): a close dropped everything the
    session had tagged, shared prefixes included, where it must let go only of its own
    hold (review: "shared prefixes/leaves kept"); 0.5.23 takes one ref per frontier
    off what that frontier covers, so a prefix another session also reached stays
    tagged. The faulty copy, after the correct release, zeroes the session_ref of every
    node the closed session covered: the other sessions' tags there are gone, and their
    shared prefix is evicted as if no session held it."""
    from ..observe.events import Cause
    from ..tree.session_refs import covered_nodes

    refs = cache.session_refs
    correct = refs.release_radix_session

    def release_radix_session(sid) -> int:
        covered = []
        if refs.enabled and sid is not None and sid not in refs.closed:
            for index in refs.by_component.values():
                lens = index.covered_len.get(sid, {})
                for leaf in index.leaves.get(sid, ()):
                    covered.extend((index, node) for node in covered_nodes(index, leaf, lens.get(leaf)))
        result = correct(sid)
        for index, node in covered:
            left = node.data[index.index].session_ref
            if left > 0 and refs.tree.nodes.get(node.id) is node:
                fired(cache, CLOSE_DROPS_SHARED_PREFIX_REFS)
                index._bump(node, -left, sid, Cause.SESSION_CLOSE)
        return result

    refs.release_radix_session = release_radix_session


# ---- 3. sglang#22897: a finished turn's record keeps the KV past its finished length ----------

RELEASE_KEEPS_OVERSHOOT = "streaming-release-keeps-overshoot"


def _install_release_keeps_overshoot(cache) -> None:
    """PR #22897 (the streaming session's overshoot trim): a turn can commit more
    tokens than its max_new_tokens (a speculative step accepts several at once), and
    it finishes at finished_len = max_new_tokens. The next turn's history holds only
    that much of its output, yet the session's record kept the KV of every committed
    token, so the next turn borrowed KV computed for tokens its history does not hold.
    SGLang 0.5.23 cuts the record to prompt + finished_len when the turn is kept
    (StreamingSession._trim_overshoot). The faulty copy keeps the record whole when a
    finished turn's release would cut it, at the cap or at a stop inside the output
    alike (the fuzzer meets the stop first)."""
    from ..observe.events import Cause

    correct = cache._rewind_record

    def rewind_record(record, target: int, cause) -> None:
        if cause is Cause.STOP and record.kv_len > target:
            fired(cache, RELEASE_KEEPS_OVERSHOOT)
            return
        correct(record, target, cause)

    cache._rewind_record = rewind_record


# ---- 4. sglang#27024: a closed session's slot keeps its lock and KV --------------------------

SLOT_LOCK_OUTLIVES_CLOSE = "slot-lock-outlives-close"


def _install_slot_lock_outlives_close(cache) -> None:
    """Issue #27024 (with #27025): a streaming session's slot pins KV with a tree lock
    eviction cannot see, and the release of a session whose lock sat on the virtual
    node failed (dec_lock_ref of the _VirtualNode), so the close went through while the
    slot's lock and record stayed: locked KV no session owned, never freed. 0.5.23
    unlocks the slot's own lock receipt and frees its record on every close. The
    faulty copy gives up the release of a slot that holds a lock, and the close then
    forgets the session."""
    correct = cache.release_session

    def release_session(sid: str) -> bool:
        slot = cache.session_slots.get(sid)
        if slot is not None and slot.lock is not None:
            fired(cache, SLOT_LOCK_OUTLIVES_CLOSE)
            return False
        return correct(sid)

    cache.release_session = release_session


FAULTS = (
    Fault(LATE_FINISH_RETAGS_CLOSED, "sgl-project/sglang#29173", ("full",),
          "a request finishing after its session closed tags the closed session again: it pins KV no close releases",
          _install_late_finish_retags_closed, sessions=True),
    Fault(CLOSE_DROPS_SHARED_PREFIX_REFS, "sgl-project/sglang#27058", ("full",),
          "closing a session takes every session's tag off the prefixes it reached: a shared prefix another session "
          "still holds loses its session_ref", _install_close_drops_shared_prefix_refs, sessions=True),
    Fault(RELEASE_KEEPS_OVERSHOOT, "sgl-project/sglang#22897", ("full",),
          "a finished streaming turn leaves its session's record untrimmed past prompt + finished_len: the next "
          "turn borrows KV of output its history does not hold", _install_release_keeps_overshoot, sessions=True),
    Fault(SLOT_LOCK_OUTLIVES_CLOSE, "sgl-project/sglang#27024", ("full",),
          "closing a streaming session gives up releasing a slot that holds a lock: the slot's lock and KV outlive "
          "the session", _install_slot_lock_outlives_close, sessions=True),
)
