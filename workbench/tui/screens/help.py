"""F1 / ? help: the keys (from the one binding table), the focused panel's purpose, the
legend of badges and colours (from the same styles the tree uses) and the live ops'
syntax (from the op registry)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ...model.scenarios.live import CLAUSE_HELP, OP_HELP
from ..bindings import Command, key_label
from ..widgets.badges import CHANGE_LEGEND, CHANGE_STYLE

PANELS = {
    "steps": "Every checked step; enter jumps to it. ✗ marks a failed step.",
    "tree": "The radix tree after the step. Enter/space expands; the step's node is followed. "
            "y here explains the highlighted node (elsewhere, on a match step, why the match stopped).",
    "events": "What the step did, in order, with causes; enter selects the event's node.",
    "sessions": "The sessions at this step; the highlighted one's nodes are highlighted in the tree "
                "(its frontier strongly, the rest of its coverage underlined).",
}


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,f1,q,question_mark", "dismiss", "close")]

    def __init__(self, table: tuple[Command, ...], focused: str | None, footer: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.table, self.panel = table, focused
        self.footer = footer  # the binding ids the footer shows now: the keys it left out are named first

    def compose(self) -> ComposeResult:
        keys = Table("key", "does", "id", box=None, padding=(0, 2))
        for command in self.table:
            keys.add_row(key_label(command.key), f"{command.category}: {command.description}", command.id)
        legend = Text()
        legend.append("#7 [1 2 3] 3t  full:3 🔒1 r0  swa:✝  leaf\n", style="bold")
        legend.append("node id, key, tokens; per component value length (✝ tombstone), 🔒 lock_ref, "
                      "LRU rank (r0 most recent); leaf = evictable Full leaf; +k = k more nodes folded in a chain "
                      "(its ranks top to bottom r6–4, leaf #9: its bottom node is the leaf); "
                      "§n = n sessions hold it, §1=s1: session s1's frontier\n")
        for kind, style in CHANGE_STYLE.items():
            legend.append(f" {kind} ", style=style)
            legend.append(f" {CHANGE_LEGEND[kind]}\n")
        panel = PANELS.get(self.panel or "", "Tab moves between panels.")
        with VerticalScroll(id="help"):
            yield Static(Text("urc workbench — help (esc closes)", style="bold"))
            yield Static(Text(f"this panel: {panel}"))
            left_out = [f"{key_label(c.key)} {c.footer or c.description}" for c in self.table
                        if self.footer and c.id not in self.footer and c.id != "app.help"]
            if left_out:
                yield Static(Text("not in the footer at this width: " + " · ".join(left_out), style="italic"))
            yield Static(keys)
            yield Static(legend)
            yield Static(Text("live ops (:), any op then " + CLAUSE_HELP + "\n" + "\n".join(OP_HELP.values())))
