"""``urc tui --listen``: a live server's cache through its KV events. The app lays out
``model.kv_wire.live.LiveModel``'s lines (the block tree of one medium, the recent
batches, the chosen batch and the counts) and pumps the listener on a timer; it never
touches a socket itself, so a lost connection or a malformed message is a line the
model hands it."""

from __future__ import annotations

from rich.text import Text
from textual.app import App, ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Footer, Header, Static

from ..model.kv_wire.live import LiveModel


class ListenApp(App[None]):
    TITLE = "urc listen"
    PUMP_EVERY = 0.2  # seconds between looks at the socket
    BINDINGS = [("left", "move(-1)", "earlier batch"), ("right", "move(1)", "later batch"),
                ("end", "latest", "follow the latest"), ("m", "medium", "next medium"), ("q", "quit", "quit")]
    CSS = """
    #tree-box { width: 1fr; border: round $accent; }
    #side { width: 1fr; }
    #counts { height: 3; border: round $accent; }
    #batches-box { height: 1fr; border: round $accent; }
    #step-box { height: 1fr; border: round $accent; }
    """

    def __init__(self, model: LiveModel) -> None:
        super().__init__()
        self.model = model

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal():
            with VerticalScroll(id="tree-box"):
                yield Static(id="tree")
            with Vertical(id="side"):
                yield Static(id="counts")
                with VerticalScroll(id="batches-box"):
                    yield Static(id="batches")
                with VerticalScroll(id="step-box"):
                    yield Static(id="step")
        yield Footer()

    def on_mount(self) -> None:
        self.title = self.model.title()
        for box, title in (("#tree-box", "blocks"), ("#batches-box", "batches"), ("#step-box", "batch")):
            self.query_one(box).border_title = title
        self.render_model()
        if self.model.session is not None:
            self.set_interval(self.PUMP_EVERY, self.pump)

    def pump(self) -> None:
        if self.model.pump():
            self.render_model()

    def render_model(self) -> None:
        model = self.model
        self.query_one("#tree", Static).update(Text("\n".join(model.tree_lines())))
        self.query_one("#counts", Static).update(Text("\n".join(model.counts_lines())))
        batches = Text()
        for chosen, passed, line in model.batch_lines():
            batches.append(("▶ " if chosen else "  ") + line + "\n", style="red" if not passed else
                           "reverse" if chosen else "")
        self.query_one("#batches", Static).update(batches)
        step = Text()
        for style, line in model.step_lines():
            step.append(line + "\n", style=style)
        self.query_one("#step", Static).update(step)

    def action_move(self, by: int) -> None:
        self.model.move(by)
        self.render_model()

    def action_latest(self) -> None:
        self.model.chosen = None
        self.render_model()

    def action_medium(self) -> None:
        self.model.next_medium()
        self.render_model()

    def on_unmount(self) -> None:
        self.model.close()
