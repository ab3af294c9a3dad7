"""A live request as a recorded request call sees it, read before the call changes it.

The request ops declare how they are recorded (``OpSpec.record``), and a recording
reads SGLang's request objects through this view: plain attributes, so fakes exercise
it without SGLang. The recorder (``workbench.record``) uses the same view.
"""

from __future__ import annotations

import dataclasses
from typing import Optional


@dataclasses.dataclass
class ReqView:
    """What a request call's request holds, read before the call changes it."""

    rid: str
    ids: list[int]  # origin_input_ids + output_ids: the tokens its row is for
    committed: int  # kv.kv_committed_len: the row's computed length
    finished_len: Optional[int] = None
    aborted: bool = False  # finished with FINISH_ABORT: its release registers no session reference


def req_view(req) -> Optional[ReqView]:
    if req is None or getattr(req, "rid", None) is None:
        return None
    ids = [int(t) for t in getattr(req, "origin_input_ids", ())] + [int(t) for t in getattr(req, "output_ids", ())]
    kv = getattr(req, "kv", None)
    committed = getattr(kv, "kv_committed_len", None)
    finished_len = getattr(req, "finished_len", None)
    aborted = type(getattr(req, "finished_reason", None)).__name__ == "FINISH_ABORT"
    return ReqView(str(req.rid), ids, int(committed) if committed is not None else len(ids),
                   int(finished_len) if finished_len is not None else None, aborted)


def view_of_first_arg(args: tuple, kwargs: dict) -> Optional[ReqView]:
    """``record_before`` of the request calls: the request as it is before the call."""
    return req_view(args[0] if args else kwargs.get("req"))
