"""One picture of a timeline: the state after a step, folded and captioned, as DOT.
Shared by ``urc svg`` and the benchmark (and later the TUI's export key)."""

from __future__ import annotations

from typing import Optional

import graphviz

from cache.config.reference import config_line

from ..model.timeline.fmt import fields_text
from ..model.timeline.request_diff import request_diff
from ..model.timeline.shown_sessions import session_rows
from ..model.timeline.shown_tree import eviction_order_text
from ..model.timeline.timeline import Timeline
from .dot import caption_text, to_dot
from .graph import elide, state_graph, subtree_sizes


def picture(timeline: Timeline, step: int, diff_from: Optional[int] = None, max_nodes: int = 500) -> graphviz.Digraph:
    state = timeline.state_after(step)
    diff = timeline.diff(diff_from, step) if diff_from is not None else None
    graph = state_graph(state, diff)
    chained = graph.graph["folded"]  # the tree view's chains (model.shown_tree)
    subtree_sizes(graph)
    elided = elide(graph, max_nodes)
    record = timeline.records[step - 1] if step else None
    op = f"{record.step.op}({fields_text(record.step.fields)})" if record else None
    caption = caption_text(timeline.scenario.name, step, op, state.pools, diff_from, config_line(timeline.scenario.config))
    if order := eviction_order_text(state):  # Full's leaves in its policy's order (not under lru)
        caption += "\n" + order
    folded = [f"{chained} nodes folded into chains"] if chained else []
    folded += [f"{elided} nodes beyond --max-nodes {max_nodes} folded"] if elided else []
    if folded:
        caption += "\n" + "; ".join(folded)
    changes = None
    if diff_from is not None:  # what the highlighted steps did to the requests, their events included
        first, last = sorted((diff_from, step))
        events = [e for r in timeline.records[first:last] for e in r.events]
        changes = request_diff(timeline.state_after(diff_from).requests, state.requests, events)
    return to_dot(graph, caption, name=f"step{step}", requests=state.requests, request_diff=changes,
                  sessions=session_rows(state))
