"""``d``: what changed between two steps, node by node side by side (before | after),
then pools and requests. Opens on the current step against the previous one; the
two step numbers can be edited to compare any pair."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Input, Label, Static

from ...model.timeline.cursor import TimelineCursor
from ...model.timeline.diff import StateDiff, diff_text
from ..widgets.badges import node_label

MAX_ROWS = 500  # a diff across a whole trace can name every node: show the first ones and say so


class DiffScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,d,q", "dismiss", "close")]

    def __init__(self, cursor: TimelineCursor, start: int, end: int) -> None:
        super().__init__()
        self.cursor, self.start, self.end = cursor, start, end

    def compose(self) -> ComposeResult:
        with Vertical(id="diff"):
            yield Label("", id="diff-title")
            with Horizontal(id="diff-steps"):
                yield Label("from step ")
                yield Input(str(self.start), type="integer", id="diff-from")
                yield Label(" to step ")
                yield Input(str(self.end), type="integer", id="diff-to")
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
            before, after = cursor.timeline.state_after(self.start), cursor.timeline.state_after(self.end)
        table = self.query_one(DataTable)
        table.clear()
        components = after.components
        nodes = sorted(diff.node_kinds)
        for node_id in nodes[:MAX_ROWS]:
            old, new = diff.records_before.get(node_id), diff.records_after.get(node_id)
            table.add_row(
                f"#{node_id}", ", ".join(sorted(diff.kinds(node_id))),
                node_label(old, components, {}) if old is not None else Text("—", style="dim"),
                node_label(new, components, {}) if new is not None else Text("—", style="dim"),
                key=str(node_id),
            )
        more = f" (first {MAX_ROWS} of {len(nodes):,} nodes)" if len(nodes) > MAX_ROWS else ""
        nodes_text = f"{len(nodes):,} node{'s' if len(nodes) != 1 else ''} changed{more}"
        self.query_one("#diff-title", Label).update(
            Text(f"diff: the state after step {self.start:,} → after step {self.end:,} ({nodes_text}; esc closes)",
                 style="bold"))
        self.query_one("#diff-globals", Static).update(self._globals(diff, before.components))

    @staticmethod
    def _globals(diff: StateDiff, components) -> Text:
        """The lines that are not about one node: LRU moves to the front, pools, requests."""
        lines = [line for line in diff_text(diff) if not line.startswith("#")]
        return Text("\n".join(lines) or "no pool or request changed", style="" if lines else "dim")
