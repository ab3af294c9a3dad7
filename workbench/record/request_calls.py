"""A live request's life, read from the cache calls it makes, as request ops.

The cache never sees a request whole: SGLang's scheduler matches it
(``match_prefix`` with ``req``), locks the node it matched (``req.lock = lock(…)``,
once ``req.extend_end`` says how far it extends), allocates the row itself, grows it
each decode step (the cache sees only ``evict_sliding_windows``), checkpoints it
(``checkpoint(req, up_to=…)``) and releases it with ``release_kv_cache`` — a module
function, so the cache sees ``claim_kv_row`` → maybe ``checkpoint`` → ``free_kv_row``
→ ``unlock`` → ``on_release(req, checkpointed=…)``. The tracker here keeps, per rid,
what the trace has given the request so far (its tokens on replay), so each of those
calls becomes ``req_prefill`` / ``req_decode`` / ``checkpoint`` / ``release``.

A request the trace cannot replay as request ops (admitted before recording, a
chunked prefill, a host hit, a key the op cannot express) stays as today's tree
calls: it is never *tracked*, and its request-level calls are noted as comments.
Everything reads plain attributes, so fakes exercise it without SGLang.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from ..model.ops.request_view import ReqView, req_view
from ..model.ops.requests import CHECKPOINT, DECODE, PREFILL, RELEASE


@dataclasses.dataclass
class _Pending:
    """A request's latest match (``match_prefix`` with ``req``), waiting for its lock."""

    req: Any
    node: Any
    tokens: list[int]
    prefix_len: int
    why_not: str  # non-empty: why its admission cannot be a req_prefill


@dataclasses.dataclass
class LiveRequest:
    name: str
    known: int  # tokens the trace has given it: its row length on replay


class RequestTracker:
    """Names requests (``r1``, ``r2`` … by first sight of the rid) and keeps the
    tracked ones' replayed length."""

    def __init__(self) -> None:
        self._names: dict[str, str] = {}
        self._pending: dict[str, _Pending] = {}
        self.running: dict[str, LiveRequest] = {}  # rid -> a request replayed as request ops

    def name(self, rid: str) -> str:
        if rid not in self._names:
            self._names[rid] = f"r{len(self._names) + 1}"
        return self._names[rid]

    def tracked(self, req) -> Optional[LiveRequest]:
        rid = getattr(req, "rid", None)
        return self.running.get(str(rid)) if rid is not None else None

    # ---- admission ------------------------------------------------------------------
    def matched(self, req, node, tokens: list[int], extra_key, prefix_len: int, host_hit: int) -> None:
        """A match made for ``req``: its admission is the next lock on ``node``."""
        view = req_view(req)
        if view is None:
            return
        self.name(view.rid)
        why = ""
        if tokens != view.ids:
            why = "its match key is not its whole sequence (a capped key)"
        elif extra_key is not None or getattr(req, "cache_salt", None) is not None:
            why = "its key has an extra key (req_prefill takes none)"
        elif host_hit:
            why = f"its match hit {host_hit} token(s) on the host tier (a load-back)"
        elif getattr(getattr(req, "session", None), "streaming", False):
            why = "a streaming session's turn (the scheduler's session controller makes it; stream_turn is not recorded)"
        self._pending[view.rid] = _Pending(req, node, tokens, prefix_len, why)

    def admission(self, node) -> Optional[_Pending]:
        """The pending request this lock on ``node`` admits: SGLang's scheduler sets
        ``extend_end`` and then takes ``req.lock`` (a pin taken while it decides has
        no ``extend_end`` yet, and stays a plain lock)."""
        for rid, pending in self._pending.items():
            req = pending.req
            if (pending.node == node and getattr(req, "lock", None) is None
                    and getattr(req, "extend_end", None) is not None):
                return self._pending.pop(rid)
        return None

    def admit(self, pending: _Pending) -> Optional[str]:
        """Track the request, or return why its admission stays tree calls."""
        view = req_view(pending.req)
        why = pending.why_not
        if not why and int(pending.req.extend_end) < len(view.ids):
            why = f"a chunked prefill (extends to {pending.req.extend_end} of {len(view.ids)} tokens)"
        if not why and view.rid in self.running:
            why = "it is already running in the trace"
        if why:
            self.running.pop(view.rid, None)
            return why
        self.running[view.rid] = LiveRequest(self.name(view.rid), len(view.ids))
        return None

    # ---- growth ---------------------------------------------------------------------
    def gained(self, view: ReqView) -> list[int]:
        """The tokens a tracked request computed since the trace last gave it some."""
        live = self.running.get(view.rid)
        if live is None or view.committed <= live.known:
            return []
        return view.ids[live.known:view.committed]

    def grow(self, view: ReqView) -> Optional[dict]:
        """A ``req_decode`` step for what it gained, or None."""
        tokens = self.gained(view)
        if not tokens:
            return None
        live = self.running[view.rid]
        live.known += len(tokens)
        return {"op": DECODE.name, "req": live.name, "tokens": tokens}


# ---- the request ops' ``record`` functions (declared in workbench/model/ops/requests.py) ----------
def record_prefill(mapper, call) -> dict:
    """``call``: the lock that admitted a tracked request; ``call.before``: its _Pending."""
    pending = call.before
    live = mapper.requests.running[str(pending.req.rid)]
    step = {"op": PREFILL.name, "req": live.name, "tokens": pending.tokens}
    session = getattr(pending.req, "session_id", None)
    if session is not None:  # a radix-native session's request
        step["session"] = str(session)
    step["expect"] = {"prefix_len": pending.prefix_len}
    return step


def record_decode(mapper, call) -> Optional[dict]:
    """``call.before``: the request as it was before its next call."""
    return mapper.requests.grow(call.before)


def record_checkpoint(mapper, call):
    """``checkpoint(req, up_to=…)`` of a tracked request (its decode is written before it)."""
    view: ReqView = call.before
    live = mapper.requests.running.get(view.rid) if view is not None else None
    if live is None:
        return None  # not a trace request: its tree calls were recorded as they happened
    step: dict = {"op": CHECKPOINT.name, "req": live.name}
    up_to = call.arg(1, "up_to")
    if up_to is not None and int(up_to) != live.known:
        step["up_to"] = int(up_to)
    return step


def record_release(mapper, call):
    """``on_release(req, checkpointed=…)``: the end of a tracked request's ``release_kv_cache``."""
    view: ReqView = call.before
    live = mapper.requests.running.pop(view.rid, None) if view is not None else None
    if live is None:
        return None
    step: dict = {"op": RELEASE.name, "req": live.name}
    if not call.arg(1, "checkpointed", True):
        step["insert"] = False
    if view.finished_len is not None:
        step["stop_at"] = view.finished_len
    if view.aborted:
        step["abort"] = True
    return step
