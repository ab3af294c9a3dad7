"""Each component's LRU order, most recent first, and with a host tier each host LRU
(``swa_host``: host-only data, in the order it got there); nodes that moved this step
marked. Under an eviction policy other than lru, Full's evictable leaves in the order
it evicts them, each with what decides its place ("priority 0", "1 hit")."""

from __future__ import annotations

from rich.text import Text

from ...model.ops.spec import BASE
from ...model.timeline.shown_tree import eviction_order_text
from ...model.timeline.step_view import StepView
from .badges import COMPONENT_STYLE
from .panel import TextPanel

SHOWN = 24


class LRUPanel(TextPanel):
    def show(self, view: StepView) -> None:
        state, diff = view.state, view.diff
        text = Text()
        for name in (BASE, *state.shape.lru_components):
            order = [node_id for _, node_id in state.sorted_order(name)[:SHOWN]]
            total = len(state.sorted_order(name))
            moved = set(diff.lru_moves.get(name, {})) | set(diff.moved_to_mru.get(name, ())) if diff else set()
            text.append(f"{name} ", style=f"bold {COMPONENT_STYLE.get(name.removesuffix('_host'), 'white')}")
            text.append("MRU ", style="dim")
            for node_id in order:
                text.append(f"#{node_id}", style="bold yellow" if node_id in moved else "default")
                text.append("↑ " if node_id in moved else " ")
            if total > SHOWN:
                text.append(f"… {total - SHOWN:,} more", style="dim")
            text.append(" LRU\n", style="dim")
        if state.eviction_policy != "lru":
            eviction_line(text, state)
        self.put(text)  # relaid out: a new component adds a row (and the panel scrolls)



def eviction_line(text: Text, state) -> None:
    """Full's evictable leaves, first victim first, under the policy's name."""
    head, _, rest = eviction_order_text(state, SHOWN // 2).partition(": ")
    text.append(f"{head}: ", style=f"bold {COMPONENT_STYLE.get(BASE, 'white')}")
    text.append(rest + "\n")
