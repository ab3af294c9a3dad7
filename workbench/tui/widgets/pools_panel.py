"""Every pool's counters at this step with their change since the previous one; a pool
whose balance check failed is shown in red."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from ...model.timeline.step_view import StepView
from .panel import Panel

COUNTERS = ("total", "available", "evictable", "protected", "held")


class PoolsPanel(Panel, Static):
    def show(self, view: StepView) -> None:
        state, before, record = view.state, view.previous_state, view.record
        table = Table(box=None, padding=(0, 1), expand=False)
        table.add_column("pool", min_width=6)
        for counter in COUNTERS:
            table.add_column(counter, justify="right")
        broken = {v.name.split(".")[1] for v in (record.violations if record else ()) if v.name.startswith("pool.")}
        for name, pool in state.pools.items():
            old = before.pools.get(name)
            cells = []
            for counter in COUNTERS:
                value = getattr(pool, counter)
                delta = value - getattr(old, counter) if old is not None else 0
                cell = Text(f"{value:,}")
                if delta:
                    cell.append(f" {delta:+,}", style="yellow")
                cells.append(cell)
            table.add_row(Text(name, style="bold red" if name in broken else "bold"), *cells)
        self.update(table, layout=False)  # fixed size: no relayout per step
