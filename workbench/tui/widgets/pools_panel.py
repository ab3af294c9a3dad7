"""Every pool's counters at this step with their change since the previous one; a pool
whose balance check failed is shown in red. With a storage tier, a line under them: its
pages (KV, and SWA's and Mamba's), the stores and the prefetches in flight."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ...model.timeline.step_view import StepView
from .panel import TextPanel

COUNTERS = ("total", "available", "evictable", "protected", "held")


class PoolsPanel(TextPanel):
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
        storage = state.storage
        if storage is None:
            self.put(table)  # relaid out: a chapter with more pools shows them all (and it scrolls)
            return
        line = Text("storage", style="bold magenta")
        aux = sum(1 for key in storage.keys if "." in key)  # "<hash>.swa", "<hash>.mamba"
        line.append(f" {storage.backend}  pages {len(storage.keys) - aux}" + (f" (+{aux} swa/mamba)" if aux else "")
                    + f"  storing {len(storage.in_flight)}")
        for rid, anchor, tokens, stage in storage.prefetches:
            line.append(f"  prefetching {rid} at #{anchor} ({tokens}t, {stage})", style="cyan")
        self.put(Group(table, line))
