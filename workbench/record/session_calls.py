"""A live scheduler's session calls, read from the cache, as session ops.

SGLang's scheduler opens a radix session with ``open_session`` (its controller, then
``cache.open_radix_session`` when the session radix cache is on) and closes it with
``close_session`` (``cache.release_radix_session``, then the controller, whose close
calls it again: a no-op on the tombstone). The cache sees only the two tree calls, so
those become ``session_open`` / ``session_release``; the second release of a close is
left out. A streaming session's controller calls never reach the cache: its turns stay
tree calls in a recording.
"""

from __future__ import annotations

from typing import Optional

from ..model.ops.sessions import OPEN, RELEASE


def record_open(mapper, call) -> dict:
    """``open_radix_session(session_id)``: the session is open again."""
    sid = str(call.arg(0, "session_id"))
    mapper.closed_sessions.discard(sid)
    return {"op": OPEN.name, "session": sid}


def record_release(mapper, call) -> Optional[dict]:
    """``release_radix_session(session_id)``; None for the repeat inside the controller's
    close (the session is already closed in the recording)."""
    sid = call.arg(0, "session_id")
    if sid is None or str(sid) in mapper.closed_sessions:
        return None
    mapper.closed_sessions.add(str(sid))
    return {"op": RELEASE.name, "session": str(sid)}
