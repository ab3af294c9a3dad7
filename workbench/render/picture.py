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


MAX_LEAVES = 40  # nodes side by side: about 5,000 pt wide at the labels' 10 pt, still readable when shown whole


def picture(timeline: Timeline, step: int, diff_from: Optional[int] = None, max_nodes: int = 500,
            max_leaves: Optional[int] = MAX_LEAVES) -> graphviz.Digraph:
    """The state after ``step`` as DOT; beyond ``max_nodes`` nodes, or ``max_leaves`` side
    by side (None: no cap), subtrees fold into placeholders and the caption says so."""
    state = timeline.state_after(step)
    diff = timeline.diff(diff_from, step) if diff_from is not None else None
    graph = state_graph(state, diff)
    chained = graph.graph["folded"]  # the tree view's chains (model.shown_tree)
    subtree_sizes(graph)
    drawn_before = graph.number_of_nodes()
    elided = elide(graph, max_nodes, max_leaves)
    by_nodes = elided and drawn_before > max_nodes and graph.number_of_nodes() - _placeholders(graph) >= max_nodes
    record = timeline.records[step - 1] if step else None
    op = f"{record.step.op}({fields_text(record.step.fields)})" if record else None
    caption = caption_text(timeline.scenario.name, step, op, state.pools, diff_from, config_line(timeline.scenario.config))
    if order := eviction_order_text(state):  # Full's leaves in its policy's order (not under lru)
        caption += "\n" + order
    folded = [f"{chained} nodes folded into chains"] if chained else []
    if elided:
        folded.append(f"{elided} nodes beyond --max-nodes {max_nodes} folded" if by_nodes else
                      f"{elided} nodes folded to keep the picture at most {max_leaves} nodes wide")
    if folded:
        caption += "\n" + "; ".join(folded)
    changes = None
    if diff_from is not None:  # what the highlighted steps did to the requests, their events included
        first, last = sorted((diff_from, step))
        events = [e for r in timeline.records[first:last] for e in r.events]
        changes = request_diff(timeline.state_after(diff_from).requests, state.requests, events)
    return to_dot(graph, caption, name=f"step{step}", requests=state.requests, request_diff=changes,
                  sessions=session_rows(state))


def _placeholders(graph) -> int:
    return sum(1 for _, data in graph.nodes(data=True) if data.get("kind") == "folded")
