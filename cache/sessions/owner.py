"""What the sessions room reads of the controller (``SessionOwner``), as a protocol:
its public names only, so the session mixins and checks name no module above them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Protocol

if TYPE_CHECKING:
    import torch

    from ..basics.keys import RadixKey
    from ..basics.request import Req
    from ..observe.events import Cause, EventBus
    from ..tree.core import UnifiedTreeCore
    from ..tree.hooks import HookTable
    from ..tree.session_refs import SessionRefTracker


class SessionBook(Protocol):
    """The scheduler's open sessions (``SessionController``), by id."""

    sessions: dict


class SessionOwner(Protocol):
    """The controller as the sessions room sees it: its tree, pools' hooks, running
    requests and session records, and the request flows a streaming turn reuses."""

    tree: UnifiedTreeCore
    page_size: int
    hooks: HookTable
    events: EventBus
    requests: dict[str, Req]
    session_refs: SessionRefTracker
    session_controller: SessionBook
    session_slots: dict  # session id -> its SessionSlot (streaming.py)

    def free_kv(self, values: list[torch.Tensor], cause: Cause = ..., node: Optional[int] = None,
                full_only: bool = False, trusted: bool = False) -> int: ...

    def open_radix_session(self, session_id: str) -> int: ...

    def release_radix_session(self, session_id: str) -> int: ...

    # the request flows (cache/requests/flows.py) a streaming turn runs through
    def admit_req(self, req: Req, key: RadixKey, chunk: Optional[int] = None) -> Req: ...

    def take_row_slots(self, req: Req, count: int) -> Optional[torch.Tensor]: ...

    def grow_row(self, req: Req, new: Optional[torch.Tensor]) -> None: ...

    def checkpoint_into_tree(self, req: Req, finished: bool, up_to: int) -> None: ...
