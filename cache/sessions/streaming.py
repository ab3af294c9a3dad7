"""Streaming sessions' KV records (SGLang 0.5.23's session/streaming_session.py).

A streaming session keeps one KV record (the row, its lengths, its window cursor and
Mamba slots) and one tree lock across turns. The first turn's record becomes the
session's at its allocation (``take``); every later turn borrows it: its match lands
on the slot's stand-in node with the committed history as prefix, it locks nothing
and inserts nothing, and on finish the slot keeps the record (trimmed to the stop).
An aborted turn gets record and lock back and is released like any request.

Here a record is a plain ``Req`` (only its KV fields are used) and a turn is a
``StreamingTurn`` whose KV fields read and write the record it runs on, so two turns
on one record see each other's changes exactly as SGLang's shared ``req.kv`` does.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, ClassVar, Iterator, Optional

import torch

from ..basics.errors import CacheError, ReferenceAssertsError
from ..observe.events import Cause, EventKind
from ..basics.keys import ceil_align
from ..basics.params import IncLockRefResult
from ..basics.request import Req

if TYPE_CHECKING:
    from .owner import SessionOwner

    _Owner = SessionOwner  # the controller's names these mixins use
else:
    _Owner = object

VIRTUAL_NODE = -1  # a turn's last_node while it runs on its session's slot (SGLang's _VirtualNode)

# SGLang's ReqKvInfo: what a turn borrows from its slot (everything else stays the turn's own)
RECORD_FIELDS = (
    "kv_indices", "cache_protected_len", "cache_inserted_len", "swa_evicted_seqlen", "mamba_pool_idx",
    "mamba_ping_pong", "mamba_next_track_idx", "mamba_last_track_seqlen", "mamba_prev_track_seqlen",
    "mamba_keep_idx", "mamba_cow_src", "retraction_backup", "component_state",
)


class StreamingTurn(Req):
    """A request of a streaming session; ``record`` holds its KV fields (its own until
    the slot takes it, the slot's while it borrows it)."""

    session: Optional[str]  # the session it runs in; None once detached (finished, aborted)
    max_new_tokens: Optional[int]  # what the next turn's history takes of its output
    prefix_len: int  # what its match reused (the slot's committed history when borrowed)
    borrowed_slot: bool  # it runs on its session's record
    session_streaming: ClassVar[bool] = True

    def kv_record(self) -> Req:
        record = self.__dict__.get("record")
        if record is None:
            record = self.__dict__["record"] = Req("", [], torch.empty(0, dtype=torch.int64), 0, None)
        return record


def _delegate(name: str) -> property:
    return property(lambda self: getattr(self.kv_record(), name),
                    lambda self, value: setattr(self.kv_record(), name, value))


for _name in RECORD_FIELDS:
    setattr(StreamingTurn, _name, _delegate(_name))


@dataclasses.dataclass(eq=False)
class SessionSlot:
    """A session's record and the tree lock on its published prefix."""

    record: Req
    lock: Optional[IncLockRefResult]
    publishes_prompt: bool = True  # until the first turn finishes, its checkpoints publish its prompt

    @property
    def holds_kv(self) -> bool:
        return not self.record.released


class StreamingSessions(_Owner):
    """Mixed into ``UnifiedRadixCache``: the slots (``session_slots``) and the cache's
    streaming entry points, each telling its caller whether it handled the request.
    It reads the controller only by ``SessionOwner``'s names (owner.py)."""

    session_slots: dict[str, SessionSlot]

    def borrowed_slot(self, req: Req) -> Optional[SessionSlot]:
        """The slot whose record ``req`` runs on, if any."""
        sid = getattr(req, "session", None)
        slot = self.session_slots.get(sid) if sid is not None else None
        return slot if slot is not None and slot.record is req.__dict__.get("record") else None

    def session_records(self) -> dict[str, Req]:
        return {sid: slot.record for sid, slot in self.session_slots.items()}

    def kv_holders(self) -> Iterator[Req]:
        """Every distinct KV record: running requests' own and the slots' (a record
        two turns share, or one no turn runs on, counted once)."""
        seen = set()
        for req in self.requests.values():
            record = req.kv_record() if isinstance(req, StreamingTurn) else req
            if id(record) not in seen:
                seen.add(id(record))
                yield record
        for slot in self.session_slots.values():
            if id(slot.record) not in seen:
                seen.add(id(slot.record))
                yield slot.record

    # ---- the turn's match: borrow the slot's record --------------------------------
    def _borrow_slot(self, turn: StreamingTurn, slot: SessionSlot, key_len: int) -> int:
        """try_match_prefix: the turn borrows the record; its prefix is the committed
        history (at most the key), never below what the tree owns; a rewind under the
        SWA cursor lands on a page boundary; the tail past it is freed."""
        record = slot.record
        prefix = min(record.kv_len, key_len)
        if prefix < record.cache_protected_len:
            raise ReferenceAssertsError(
                f"SGLang asserts here: streaming session prefix shrank: {prefix} < {record.cache_protected_len}")
        ps = self.page_size
        if ps > 1 and record.swa_evicted_seqlen > prefix:
            prefix -= prefix % ps
        turn.__dict__["record"] = record
        self._emit_slot(turn.session, record.kv_len, Cause.REQUEST, f"borrowed by {turn.rid}: prefix {prefix}")
        self._rewind_record(record, prefix, Cause.SESSION)
        if record.kv_len == 0:  # a stop inside the first page, under the SWA cursor: nothing left
            raise ReferenceAssertsError("SGLang asserts here: a reused row must carry allocated KV "
                                        "(ReqToTokenPool.alloc, for a turn borrowing a record rewound to nothing)")
        return prefix

    def _rewind_record(self, record: Req, target: int, cause: Cause) -> None:
        """Free the record past ``target`` from the next page on (a paged free keeps the
        partial page until the session is released) and clamp its cursors."""
        ps = self.page_size
        start = ceil_align(target, ps)
        row = record.kv_indices
        if row.shape[0] > start:
            self.free_kv([row[start:]], cause, None)
        record.kv_indices = row[:target]
        record.swa_evicted_seqlen = min(record.swa_evicted_seqlen, target)

    # ---- ownership -----------------------------------------------------------------
    def _take_slot(self, turn: StreamingTurn) -> None:
        """maybe_hand_to_session: a turn's first allocation gives the session its record
        and the lock its admission took."""
        if self.borrowed_slot(turn) is not None:
            return
        sid = turn.session
        if sid in self.session_slots:
            raise ReferenceAssertsError(f"SGLang asserts here: session {sid!r} already has a slot")
        slot = SessionSlot(turn.kv_record(), None)
        self._lock_to_slot(turn, slot)
        self.session_slots[sid] = slot
        self._emit_slot(sid, turn.kv_len, Cause.REQUEST, f"taken from {turn.rid}")

    def _lock_to_slot(self, turn: StreamingTurn, slot: SessionSlot) -> None:
        slot.lock, turn.lock = turn.lock, None
        turn.last_node = VIRTUAL_NODE

    def session_checkpoint(self, req: Req, up_to: int) -> bool:
        """The request flows' checkpoint of a streaming turn (False: ``req`` runs on no
        session slot, so it is checkpointed as any request). A turn publishes nothing
        of its own, except the first turn's prompt: the slot publishes it for others to
        share, and its lock follows the insert."""
        slot = self.borrowed_slot(req)
        if slot is None:
            return False
        if slot.publishes_prompt:
            req.lock, slot.lock = slot.lock, None
            req.last_node = req.lock.node_id if req.lock is not None else self.tree.root.id
            try:
                self.checkpoint_into_tree(req, finished=False, up_to=up_to)
            finally:
                self._lock_to_slot(req, slot)
        return True

    def keep_session_record(self, req: Req) -> bool:
        """release_kv_cache's first step (SGLang's try_cache_finished_req; False for a
        request of no streaming session): a finished turn leaves its record in the
        slot, cut at its stop (True: nothing left to release); an aborted one gets
        record and lock back and is released as any request (False)."""
        if getattr(req, "session", None) is None or not isinstance(req, StreamingTurn):
            return False
        slot = self.borrowed_slot(req)
        if slot is None:
            raise ReferenceAssertsError(f"SGLang asserts here: streaming {req.rid!r} does not run on its slot")
        session = self.session_controller.sessions.get(req.session)
        if req.finish_aborted:
            del self.session_slots[req.session]
            req.lock, slot.lock = slot.lock, None
            req.last_node = req.lock.node_id if req.lock is not None else self.tree.root.id
            if session is not None:
                session.inflight = False
            self._emit_slot(req.session, req.kv_len, Cause.ABORT, f"handed back to {req.rid}")
            req.session = None
            return False
        finished_len = req.finished_len if req.finished_len is not None else len(req.output_ids)
        target = len(req.origin_input_ids) + finished_len
        ps = self.page_size
        if ps > 1 and req.swa_evicted_seqlen > target:
            target -= target % ps  # the cursor stays page-aligned; the partial page is prefilled again
        record = slot.record
        if record.kv_len > target:
            self._rewind_record(record, target, Cause.STOP)
        req.output_ids = req.output_ids[:finished_len]
        req.__dict__["record"] = None  # detach_kv: the turn keeps no KV
        req.kv_indices = record.kv_indices[:0]
        req.swa_branching_seqlen = None
        slot.publishes_prompt = False
        if session is not None:
            session.finish_turn(req)
        self._emit_slot(req.session, record.kv_len, Cause.REQUEST, f"kept from {req.rid}")
        req.released = True
        self.requests.pop(req.rid, None)
        return True

    def release_session(self, sid: str) -> bool:
        """The session's lock, record and Mamba slots go back (True: it had a slot)."""
        slot = self.session_slots.pop(sid, None)
        if slot is None:
            return False
        if slot.lock is not None:
            self.tree.dec_lock_ref(slot.lock.node_id, slot.lock)
        record = slot.record
        for req in [r for r in self.requests.values() if r.__dict__.get("record") is record]:
            # only after a rejected turn cleared the in-flight flag (see stream_turn): SGLang
            # goes on running the turn on the freed row; we drop it
            del self.requests[req.rid]
            req.session = None
            self._emit_slot(sid, req.kv_len, Cause.SESSION, f"{req.rid} still ran on it: dropped")
        if slot.holds_kv:
            protected, row = record.cache_protected_len, record.kv_indices
            if row.shape[0] > protected:
                self.free_kv([row[protected:]], Cause.SESSION, None)
            record.kv_indices = row[:0]
            record.released = True
        for component in self.hooks.release_request:
            component.release_request(record)
        self._emit_slot(sid, 0, Cause.SESSION, "released")
        return True

    def _emit_slot(self, sid: Optional[str], tokens: int, cause: Cause, detail: str) -> None:
        if self.events.enabled:
            self.events.emit(EventKind.SLOT, None, None, cause, tokens, f"session {sid}: {detail}")


def check_streaming(cache: SessionOwner) -> list[tuple[str, str]]:
    """A slot's lock is a held receipt anchored where the tree's part of its record
    ends; a session that is not open holds no slot; a record runs one turn at a time
    (SGLang 0.5.23 breaks this: a turn rejected while another runs clears the session's
    in-flight flag, so a third turn borrows the running turn's record)."""
    out = []
    tree, sessions = cache.tree, cache.session_controller.sessions
    for sid, slot in cache.session_slots.items():
        if sid not in sessions:
            out.append(("session.closed_holds_slot", f"session {sid!r} is not open but holds a slot"))
        lock = slot.lock
        if lock is None:
            continue  # a publishing checkpoint is moving it
        if tree.live_receipts.get(lock.receipt_id) is not lock:
            out.append(("session.slot_lock", f"session {sid!r}: its lock receipt {lock.receipt_id} is not held"))
        elif tree.path_device_indices(lock.node_id).shape[0] != slot.record.cache_protected_len:
            out.append(("session.slot_lock", f"session {sid!r}: its lock ends at node {lock.node_id}, not at the "
                                             f"{slot.record.cache_protected_len} tokens the tree owns of its record"))
    runners: dict[int, list[str]] = {}
    for req in cache.requests.values():
        if isinstance(req, StreamingTurn) and req.__dict__.get("record") is not None:
            runners.setdefault(id(req.kv_record()), []).append(req.rid)
    for rids in runners.values():
        if len(rids) > 1:
            out.append(("session.record_shared", f"turns {rids} run on one session record (SGLang 0.5.23 lets a "
                                                 "rejected turn clear the in-flight flag; suspected upstream bug)"))
    return out


def refuse_if_streaming(req: Req, call: str) -> None:
    if isinstance(req, StreamingTurn) and req.session is not None:
        raise CacheError(f"{call} of a streaming turn ({req.rid!r}) is not modelled")
