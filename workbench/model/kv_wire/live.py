"""What the TUI's live view shows, as plain lines (no Textual, no Rich): the block tree
of one medium, the recent batches, the chosen batch with its violations, the counts per
medium and the last problem line. The app only lays these out; a stored listen run is
shown the same way, its view rebuilt from the file."""

from __future__ import annotations

import dataclasses
from typing import Optional

from ..scenarios.errors import printable
from .view import ConsumerView, _ordered

SHOWN_BATCHES = 200  # lines in the batch list
TREE_LINES = 400


@dataclasses.dataclass
class LiveModel:
    view: ConsumerView
    source: str  # the endpoint, or the store file
    session: Optional[object] = None  # a ListenSession while live; None for a stored run
    chosen: Optional[int] = None  # index into view.recent; None follows the latest
    medium: Optional[str] = None  # the tree's medium; None: the first one held

    def pump(self) -> bool:
        """Take what arrived without waiting; True when something did."""
        return bool(self.session is not None and self.session.pump(0))

    def media(self) -> list[str]:
        return _ordered(m for m, held in self.view.blocks.items() if held) or ["GPU"]

    def shown_medium(self) -> str:
        media = self.media()
        return self.medium if self.medium in media else media[0]

    def next_medium(self) -> None:
        media = self.media()
        current = self.shown_medium()
        self.medium = media[(media.index(current) + 1) % len(media)]

    def move(self, by: int) -> None:
        """Choose an earlier (``by`` < 0) or later batch; past the last, follow the latest."""
        last = len(self.view.recent) - 1
        if last < 0:
            return
        at = (last if self.chosen is None else self.chosen) + by
        self.chosen = None if at >= last else max(0, at)

    def record(self):
        recent = self.view.recent
        if not recent:
            return None
        return recent[-1 if self.chosen is None else min(self.chosen, len(recent) - 1)]

    def title(self) -> str:
        state = "live" if self.session is not None else "stored"
        return printable(f"urc listen {self.source} ({state})")

    def counts_lines(self) -> list[str]:
        view = self.view
        held = ", ".join(f"{m} {n:,}" for m, n in view.held().items()) or "no blocks"
        return [f"{view.batches:,} batch(es), {view.events:,} event(s), {view.violations:,} violation(s)",
                f"held: {held}"]

    def tree_lines(self) -> list[str]:
        medium = self.shown_medium()
        lines = self.view.tree_lines(medium, TREE_LINES)
        return [f"{medium} ({len(self.view.blocks.get(medium, {})):,} blocks; m: next medium)"] + \
            [printable(line) for line in lines]

    def batch_lines(self) -> list[tuple[bool, bool, str]]:
        """(chosen, passed, line) for the latest batches, oldest first."""
        recent = list(self.view.recent)[-SHOWN_BATCHES:]
        chosen = self.record()
        return [(r is chosen, r.passed, printable(r.summary())) for r in recent]

    def step_lines(self) -> list[tuple[str, str]]:
        """(style, line): the chosen batch, its events, its violations, then the last problem."""
        out: list[tuple[str, str]] = []
        record = self.record()
        if record is None:
            out.append(("italic", "no batch yet"))
        else:
            follow = " (following the latest)" if self.chosen is None else ""
            out.append(("bold", printable(record.summary()) + follow))
            out.extend(("cyan", "kv event: " + printable(line)) for line in record.lines)
            if record.events > len(record.first):
                out.append(("cyan", f"… {record.events - len(record.first)} more event(s)"))
            out.extend(("red", printable(str(v))) for v in record.violations)
        if self.view.problems:
            out.append(("yellow", printable(self.view.problems[-1])))
        return out

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
