"""``d``: what changed between two steps, node by node side by side (before | after):
only what differs (``model.timeline.diff.change_rows``), then pools and requests.
Opens on the current step against the previous one; the two step numbers can be
edited to compare any pair."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Input, Label, Static

from ...model.scenarios.errors import printable
from ...model.debugging.cursor import TimelineCursor
from ...model.timeline.diff import ChangeRow, StateDiff, change_rows, diff_text
from ..widgets.badges import node_label
from .dialog_note import DialogNote

MAX_ROWS = 500  # a diff across a whole trace can change every node: show the first changes and say so


class DiffScreen(DialogNote, ModalScreen[None]):
    BINDINGS = [Binding("escape,d,q", "dismiss", "close")]
    NOTE_ID = "diff-note"

    def __init__(self, cursor: TimelineCursor, start: int, end: int) -> None:
        super().__init__()
        self.cursor, self.start, self.end = cursor, start, end

    def compose(self) -> ComposeResult:
        with Vertical(id="diff"):
            yield Static("", id="diff-title")  # wraps at the dialog's edge
            with Horizontal(id="diff-steps"):
                yield Label("from step ")
                yield Input(str(self.start), type="integer", id="diff-from")
                yield Label(" to step ")
                yield Input(str(self.end), type="integer", id="diff-to")
            yield Static("", id="diff-note")
            yield DataTable(id="diff-nodes", cursor_type="row", zebra_stripes=True)
            yield Static(id="diff-globals")

    def on_mount(self) -> None:
        self.query_one(DataTable).add_columns("node", "change", "before", "after")
        self.show()
        self.query_one(DataTable).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        last = self.cursor.available
        try:
            start, end = int(self.query_one("#diff-from", Input).value), int(self.query_one("#diff-to", Input).value)
        except ValueError:
            self.notify("two step numbers, please", severity="warning")
            return
        if not (0 <= start <= last and 0 <= end <= last):
            self.notify(f"steps run from 0 to {last:,}", severity="warning")
            return
        self.start, self.end = start, end
        self.show()
        self.query_one(DataTable).focus()

    def show(self) -> None:
        cursor = self.cursor
        with cursor.lock:
            diff = cursor.timeline.diff(self.start, self.end)
            before = cursor.timeline.state_after(self.start)
        table = self.query_one(DataTable)
        table.clear()
        rows = change_rows(diff)  # only what changed: an LRU-only step is its rank moves
        for i, row in enumerate(rows[:MAX_ROWS]):
            table.add_row(f"#{row.node}", Text(row.what), self._cell(diff, row, "before"),
                          self._cell(diff, row, "after"), key=f"{row.node}:{i}")
        nodes = len(diff.node_kinds)
        more = f" (the first {MAX_ROWS:,} of {len(rows):,} changes)" if len(rows) > MAX_ROWS else ""
        nodes_text = f"{nodes:,} node{'s' if nodes != 1 else ''} changed{more}"
        self.query_one("#diff-title", Static).update(
            Text(f"diff: the state after step {self.start:,} → after step {self.end:,} ({nodes_text}; esc closes)",
                 style="bold"))
        self.query_one("#diff-globals", Static).update(self._globals(diff, before.components))

    @staticmethod
    def _cell(diff: StateDiff, row: ChangeRow, side: str) -> Text:
        """A node added or removed is drawn as the tree draws it; absent is a dim dash;
        the rest as plain text (a namespace or an id is never markup)."""
        text = getattr(row, side)
        if text is None:
            return Text("—", style="dim")
        if row.what in ("added", "removed"):
            record = (diff.records_after if side == "after" else diff.records_before)[row.node]
            return node_label(record, diff.components, {})
        return Text(printable(text))

    @staticmethod
    def _globals(diff: StateDiff, components) -> Text:
        """The lines that are not about one node: LRU moves to the front, pools, requests."""
        lines = [line for line in diff_text(diff) if not line.startswith("#")]
        shown = printable("\n".join(lines), lines=True)
        return Text(shown or "no pool or request changed", style="" if lines else "dim")
