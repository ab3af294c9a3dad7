"""The selected node in full: path, key, per component value / lock_ref / extras /
LRU rank / session_ref and the sessions whose frontier it is, access time, and every
step whose events named it."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from ...model.scenarios.errors import printable
from ...model.timeline.fmt import counted_key_text
from ...model.timeline.packed import PackedTokens
from ...model.timeline.step_view import StepView
from ...render.tree_view import SESSION_STYLE
from .panel import Panel


class Inspector(Panel, Static):
    follows_selection = True

    def show(self, view: StepView) -> None:
        state, diff, node_id = view.state, view.diff, view.selected
        if node_id is None:
            self.update(Text("select a node in the tree", style="dim"))
            return
        ghost = diff.ghosts.get(node_id) if diff is not None else None
        record = state.record(node_id) or ghost
        if record is None:
            self.update(Text(f"node #{node_id} is not in the tree at this step", style="dim"))
            return
        text = Text()
        text.append(f"node #{node_id}", style="bold")
        text.append("  (evicted this step)\n" if ghost is not None and node_id not in state else "\n", style="dim")
        if record.parent is not None:
            text.append(f"parent #{record.parent}\n")
        row = view.tree.row(view.tree.row_of(node_id)) if node_id in state else None
        if row is not None and row.folded:  # the tree shows it in a folded chain
            text.append(f"in the tree's row #{row.id} +{row.folded}: " + " ".join(f"#{m}" for m in row.members) + "\n",
                        style="dim")
        # an EAGLE key counts pairs, the first beginning with the token before |
        text.append(f"key  {counted_key_text(PackedTokens(record.key), record.key_head)}\n")
        if record.cache_salt is not None:
            text.append(f"cache_salt {printable(record.cache_salt)}\n")
        if node_id in state:
            text.append(f"path {counted_key_text(state.path(node_id))}\n")
        text.append(f"last access {record.last_access_time:g}  hits {record.hit_count}  priority {record.priority}\n")
        for name, comp in zip(state.components, record.components):
            value = "tombstone ✝" if comp.value_len is None else f"value {comp.value_len}"
            if comp.host_len is not None:  # the host tier's copy
                value = f"host-only, host copy {comp.host_len}" if comp.value_len is None else f"{value} +host {comp.host_len}"
            rank = state.rank(name, record) if node_id in state else None
            extras = "".join(f"  {k}={printable(v)}" for k, v in comp.extras)
            text.append(f"{name:6s}", style="bold")
            text.append(f" {value}  lock_ref {comp.lock_ref}" + (f"  LRU rank {rank}" if rank is not None else "")
                        + extras + "\n")
            if comp.session_ref or comp.session_ids:
                frontier = f"  frontier of {printable(', '.join(comp.session_ids))}" if comp.session_ids else ""
                text.append(f"       session_ref {comp.session_ref}{frontier}\n", style=SESSION_STYLE)
            head, tail = comp.value_ends
            if head:
                slots = " ".join(map(str, head)) + (" … " + " ".join(map(str, tail)) if tail else "")
                text.append(f"       slots [{slots}]\n", style="dim")
        if record.evictable_leaf:
            text.append("evictable Full leaf\n", style="green")
        if diff is not None and diff.kinds(node_id):
            text.append("this step: " + ", ".join(sorted(diff.kinds(node_id))) + "\n", style="yellow")
        steps = view.steps_touching(node_id)
        if steps:
            shown = ", ".join(map(str, steps[:20])) + (f", … ({len(steps)} steps)" if len(steps) > 20 else "")
            text.append(f"touched at steps {shown}\n", style="dim")
        self.update(text)
