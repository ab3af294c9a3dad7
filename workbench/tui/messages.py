"""The workbench's domain events: a panel says what the user chose; the app decides."""

from __future__ import annotations

from textual.message import Message


class NodeChosen(Message):
    """A node was selected (in the tree, or through one of the step's events)."""

    def __init__(self, node_id: int) -> None:
        super().__init__()
        self.node_id = node_id


class StepChosen(Message):
    """A step was chosen in the step list."""

    def __init__(self, step: int) -> None:
        super().__init__()
        self.step = step


class SessionChosen(Message):
    """A session was highlighted in the sessions panel: the tree highlights its nodes."""

    def __init__(self, sid: str) -> None:
        super().__init__()
        self.sid = sid
