"""Every pool's counters at this step with their change since the previous one; a pool
whose balance check failed is shown in red. With a storage tier, a line under them: its
pages (KV, and SWA's and Mamba's), the stores and the prefetches in flight.

Nothing is cut at any width: counts past four digits are abbreviated (65,536 -> 65.5k),
and where the table does not fit the panel each pool is ``counter value delta`` groups,
as many to a line as fit (a delta stays beside its value)."""

from __future__ import annotations

from typing import Optional

from rich.console import Group
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from ...model.timeline.step_view import StepView
from .panel import TextPanel

COUNTERS = ("total", "available", "evictable", "protected", "held")
SHORT_HEADERS = {"total": "total", "available": "avail", "evictable": "evictable", "protected": "prot", "held": "held"}


def count_text(n: int, signed: bool = False) -> str:
    """``9,999``, then three figures: ``65.5k``, ``123k``, ``1.05M`` (``signed``: ``+5``)."""
    sign = "-" if n < 0 else "+" if signed else ""
    n = abs(n)
    if n < 10_000:
        return f"{sign}{n:,}"
    for unit, size in (("k", 1e3), ("M", 1e6), ("G", 1e9)):
        v = n / size
        if v < 999.5 or unit == "G":
            return sign + (f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 100 else f"{v:.0f}") + unit
    raise AssertionError("unreachable")


class PoolsPanel(TextPanel):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._view: Optional[StepView] = None

    def on_resize(self) -> None:
        if self._view is not None:
            self.show(self._view)  # the table, or the wrapped lines, for the new width

    def show(self, view: StepView) -> None:
        self._view = view
        state, before, record = view.state, view.previous_state, view.record
        broken = {v.name.split(".")[1] for v in (record.violations if record else ()) if v.name.startswith("pool.")}
        rows = []
        for name, pool in state.pools.items():
            old = before.pools.get(name)
            cells = []
            for counter in COUNTERS:
                value = getattr(pool, counter)
                delta = value - getattr(old, counter) if old is not None else 0
                cell = Text(count_text(value))
                if delta:
                    cell.append(f" {count_text(delta, signed=True)}", style="yellow")
                cells.append(cell)
            rows.append((Text(name, style="bold red" if name in broken else "bold"), cells))
        shown = self._table(rows)
        if shown is None:
            width = max(self.scrollable_content_region.width, 1)
            shown = Group(*(self._lines(name, cells, width) for name, cells in rows))
        storage = state.storage
        if storage is None:
            self.put(shown)  # relaid out: a chapter with more pools shows them all (and it scrolls)
            return
        line = Text("storage", style="bold magenta")
        aux = sum(1 for key in storage.keys if "." in key)  # "<hash>.swa", "<hash>.mamba"
        line.append(f" {storage.backend}  pages {len(storage.keys) - aux}" + (f" (+{aux} swa/mamba)" if aux else "")
                    + f"  storing {len(storage.in_flight)}")
        for rid, anchor, tokens, stage in storage.prefetches:
            line.append(f"  prefetching {rid} at #{anchor} ({tokens}t, {stage})", style="cyan")
        self.put(Group(shown, line))

    def _table(self, rows) -> Optional[Table]:
        """The table with the short headers, or None where it is wider than the panel."""
        table = Table(box=None, padding=(0, 1), expand=False)
        table.add_column("pool", min_width=4, no_wrap=True)
        for counter in COUNTERS:
            table.add_column(SHORT_HEADERS[counter], justify="right", no_wrap=True)
        for name, cells in rows:
            table.add_row(name, *cells)
        width = self.scrollable_content_region.width
        needed = Measurement.get(self.app.console, self.app.console.options, table).maximum
        return table if width and needed <= width else None

    @staticmethod
    def _lines(name: Text, cells: list[Text], width: int) -> Text:
        """``full  total 48  avail 37 +5`` …, broken between groups to fit ``width``."""
        text, line = name.copy(), name.cell_len
        for counter, cell in zip(COUNTERS, cells):
            group = Text.assemble((f"{SHORT_HEADERS[counter]} ", "dim"), cell)
            if line + 2 + group.cell_len > width and line > 2:
                text.append("\n  ")
                line = 2
            else:
                text.append("  ")
                line += 2
            text.append_text(group)
            line += group.cell_len
        return text
