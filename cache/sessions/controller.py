"""The scheduler's sessions (SGLang 0.5.23's session/session_controller.py and the
scheduler's open_session / close_session), reachable from the cache so a scenario can
open, run, close and reap sessions with one call each.

A streaming session runs one turn at a time: each turn's input is the last finished
turn's input and output followed by the new tokens (in place: the turns share one
token list, trimmed back to what the last finished turn confirmed). Closing a
session while a turn runs is deferred until the turn is done and ``reap_sessions``
runs. Session timeouts need a clock the cache does not have and are not modelled.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional, Union

from ..basics.errors import CacheError
from ..basics.keys import RadixKey, as_key
from .streaming import VIRTUAL_NODE, SessionSlot, StreamingSessions, StreamingTurn

INFLIGHT = "Streaming session already has an active request."
EMPTY = "A session request must contain input tokens after restoring history."


class SessionOpened(NamedTuple):
    success: bool
    generation: Optional[int]  # open_radix_session's answer (None: session refs off, or refused)


class SessionClosed(NamedTuple):
    result: Optional[int]  # release_radix_session's answer (None: session refs off)
    in_controller: bool  # the controller knew the session
    deferred: bool  # a turn still runs: the close waits for it and for reap_sessions
    slot_released: bool  # its streaming slot (record, lock) went back


class TurnRejected(NamedTuple):
    """create_req refused the turn; its scheduling pass still ran (see stream_turn)."""

    rid: str
    message: str
    session_inflight: bool  # the session's in-flight flag after that pass


@dataclasses.dataclass(eq=False)
class Session:
    sid: str
    streaming: bool = False
    inflight: bool = False  # a streaming turn was created and has not finished or aborted
    close_on_finish: bool = False  # a close waits for the running turn
    last_turn: Optional[StreamingTurn] = None  # the last finished turn (SGLang's single req_node)
    committed_origin_len: Optional[int] = None  # its input length when it finished: the rollback point

    @property
    def req_nodes(self) -> int:
        return 0 if self.last_turn is None else 1

    def create_turn(self, tokens: list[int]) -> tuple[list[int], Optional[str]]:
        """Session.create_req for a plain streaming append: (the turn's input, the
        rejection message or None). The input is the last turn's own token list,
        trimmed to its confirmed length and extended: every turn shares it."""
        if self.inflight:
            return list(tokens), INFLIGHT
        history = list(tokens)
        last = self.last_turn
        if last is not None:
            history = last.origin_input_ids
            del history[self.committed_origin_len:]
            history.extend(last.output_ids[: last.max_new_tokens])
            history.extend(tokens)
        if not history:
            return history, EMPTY
        self.inflight = True
        return history, None

    def finish_turn(self, turn: StreamingTurn) -> None:
        """finish_req: the turn is the session's new rollback point."""
        self.inflight = False
        if self.last_turn is not None:
            self.last_turn.session = None
        self.last_turn = turn
        self.committed_origin_len = len(turn.origin_input_ids)


class SessionController:
    def __init__(self) -> None:
        self.sessions: dict[str, Session] = {}


class SessionCalls(StreamingSessions):
    """Mixed into ``UnifiedRadixCache``: the scheduler's session calls."""

    session_controller: SessionController
    session_slots: dict[str, SessionSlot]

    def _session_refs_on(self) -> bool:
        return self.session_refs.enabled

    def open_session(self, sid: str, streaming: bool = False) -> SessionOpened:
        """Scheduler.open_session: the controller opens it (refused for an id already
        open), then, with session refs on, the tree opens its radix session."""
        if not isinstance(sid, str):
            raise CacheError(f"a session id is a string (got {sid!r})")
        with self.events.op("open_session"):
            sessions = self.session_controller.sessions
            if sid in sessions:
                return SessionOpened(False, None)
            sessions[sid] = Session(sid, bool(streaming))
            generation = self.open_radix_session(sid) if self._session_refs_on() else None
            return SessionOpened(True, generation)

    def close_session(self, sid: str) -> SessionClosed:
        """Scheduler.close_session: release the radix session (refs on), then the
        controller's close when it knows the session (always, refs off): deferred
        while a streaming turn runs, else the slot goes back and the session is gone."""
        with self.events.op("close_session"):
            had_slot = sid in self.session_slots
            result = self.release_radix_session(sid) if self._session_refs_on() else None
            sessions = self.session_controller.sessions
            in_controller = sid in sessions
            if in_controller:
                self._close(sid)
            session = sessions.get(sid)
            deferred = session is not None and session.close_on_finish
            return SessionClosed(result, in_controller, deferred, had_slot and sid not in self.session_slots)

    def _close(self, sid: str) -> None:
        session = self.session_controller.sessions[sid]
        if session.streaming and session.inflight:
            session.close_on_finish = True
            return
        if session.last_turn is not None:
            session.last_turn.session = None
        if self._session_refs_on():
            self.release_radix_session(sid)  # a no-op on the tombstone close_session left
        self.release_session(sid)
        del self.session_controller.sessions[sid]

    def reap_sessions(self) -> tuple[str, ...]:
        """SessionController.maybe_reap with its interval elapsed: finish the deferred
        closes whose turns are done (timeouts are not modelled). Returns the closed ids."""
        with self.events.op("reap_sessions"):
            sessions = self.session_controller.sessions
            pending = [sid for sid, s in sessions.items() if s.close_on_finish]
            for sid in pending:
                sessions[sid].close_on_finish = False
                self._close(sid)  # defers again if a turn still runs
            return tuple(sid for sid in pending if sid not in sessions)

    def stream_turn(self, sid: str, name: str, tokens: list[int], max_new_tokens: Optional[int] = None,
                    priority: int = 0, checkpoint: bool = True) -> Union[StreamingTurn, TurnRejected]:
        """One turn as the scheduler runs it: create_req (history + ``tokens``), match
        one token short of the input (a later turn borrows the slot's record: its
        prefix is the committed history), lock (nothing, on the slot), KV for the rest,
        the slot takes a first turn's record and lock, then the post-prefill checkpoint
        (a first turn publishes its prompt). A turn create_req rejects still has its
        scheduling pass (its prompt cut to one stub token, so its match takes nothing),
        and where the session's slot holds KV the pass clears the session's in-flight
        flag (SGLang 0.5.23's find_active_slot calls abort_req on the session) even
        though another turn is running, so a third turn is accepted and borrows the
        running turn's record.
        We follow SGLang and flag it (invariant ``session.record_shared``); the
        rejected turn's one-token stub prefill and release are not modelled."""
        session = self.session_controller.sessions.get(sid)
        if session is None or session.close_on_finish:
            raise CacheError(f"session {sid!r} is not open (or is closing)")
        if not session.streaming:
            raise CacheError(f"session {sid!r} was not opened as a streaming session")
        if name in self.requests:
            raise CacheError(f"request {name!r} is already running")
        as_key(tokens)  # validates the ids
        with self.events.op("stream_turn", request=name):
            history, message = session.create_turn([int(t) for t in tokens])
            key = RadixKey(history)
            turn = StreamingTurn(name, history, self.tree._empty, self.tree.root.id, None, priority=priority,
                                 token_bytes=bytearray(key.data))
            turn.session, turn.max_new_tokens, turn.prefix_len, turn.borrowed_slot = sid, max_new_tokens, 0, False
            key = key[: max(len(history) - 1, 0)]
            slot = self.session_slots.get(sid)
            if message is not None:  # its prompt is cut to one stub token: its match (of none) changes nothing
                if slot is not None and slot.holds_kv:
                    session.inflight = False
                return TurnRejected(name, message, session.inflight)
            try:
                if slot is not None and slot.holds_kv:
                    self._run_on_slot(turn, slot, len(key))
                else:
                    self.admit_req(turn, key, None)
                    turn.prefix_len = turn.cache_protected_len
                    self._take_slot(turn)
            except BaseException:
                session.inflight = False  # refused: the turn never runs
                raise
            if checkpoint:
                self.session_checkpoint(turn, len(history))
            return turn

    def _run_on_slot(self, turn: StreamingTurn, slot: SessionSlot, key_len: int) -> None:
        prefix = self._borrow_slot(turn, slot, key_len)
        turn.prefix_len, turn.borrowed_slot, turn.last_node = prefix, True, VIRTUAL_NODE
        self.grow_row(turn, self.take_row_slots(turn, len(turn.origin_input_ids) - turn.kv_len))
        self.requests[turn.rid] = turn
