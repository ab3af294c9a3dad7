"""The radix tree at the current step, as ``model.shown_tree`` lays it out (the same rows
the SVG picture draws): badges per component, the step's changes marked, evicted nodes
shown once as ghosts, single-child chains folded. Children are added only when a row
is expanded, a page at a time, so a 10,000-node tree stays responsive. With a session
highlighted (the sessions panel) the rows holding its nodes are highlighted too: its
frontier nodes strongly, the rest of its coverage lightly. A redraw keeps the rows the
user opened (and closed) and, beyond the path to the selected node, opens rows breadth
first as far as the panel's height fits them, so a step that names no node does not
fold the tree away."""

from __future__ import annotations

import collections
from typing import Optional

from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from ...model.timeline.shown_tree import ShownTree
from ...model.timeline.step_view import StepView
from ..messages import NodeChosen
from .badges import SESSION_COVERED_STYLE, SESSION_FRONTIER_STYLE, row_label
from .panel import Panel

PAGE = 100  # children added per expansion step
SESSION_PATHS_OPENED = 32  # a chosen session's frontier nodes whose rows are opened


class TreePanel(Panel, Tree):
    """Tree nodes carry ``(kind, row id, start)``: kind ``node``, ``ghost`` or ``more``
    (the next page of a row's children from ``start``)."""

    follows_session = True

    def __init__(self, **kwargs) -> None:
        super().__init__("root", **kwargs)
        self.rows: Optional[ShownTree] = None
        self.session_frontier: frozenset[int] = frozenset()  # the highlighted session's nodes
        self.session_covered: frozenset[int] = frozenset()
        self.show_root = True
        self.guide_depth = 3
        self.opened: set[int] = set()  # node ids of rows the user opened, kept across steps
        self.closed: set[int] = set()  # ... and closed: never opened again by fitting
        self._auto: set[int] = set()  # rows the last redraw opened itself (their expand events are not the user's)

    def show(self, view: StepView) -> None:
        """Redraw for a new step, opening the rows on the path to the selected node."""
        rows = self.rows = view.tree
        state = view.state
        chosen = view.chosen_session
        self.session_frontier = chosen.frontier_nodes if chosen is not None else frozenset()
        self.session_covered = chosen.covered_nodes if chosen is not None else frozenset()
        self.clear()
        self.root.set_label(f"root  ({', '.join(state.components)}, page {state.page_size})")
        self.root.data = ("node", rows.root_id, 0)
        open_path = set(rows.path(view.selected))
        for node_id in sorted(self.session_frontier)[:SESSION_PATHS_OPENED]:  # the chosen session's frontier in view
            open_path.update(rows.path(node_id))
        self._auto = open_path | (self._fitting(rows, max(self.size.height, 12)) - self.closed)
        open_path = self._auto | self.opened
        self._fill(self.root, rows.root_id, 0, open_path)
        self.root.expand()
        row = rows.row_of(view.selected) if view.selected is not None else None
        target = self._find(self.root, row) if row is not None else None
        if target is not None:  # lines are laid out on the next refresh
            self.call_after_refresh(self._land_on, target)

    def _fitting(self, rows: ShownTree, lines: int) -> set[int]:
        """Node ids of the rows to open, breadth first, while every shown row fits in
        ``lines`` (the root's children always show)."""
        opened, shown = set(), 1 + len(rows.children(rows.root_id))
        queue = collections.deque(rows.children(rows.root_id))
        while queue and shown < lines:
            row_id = queue.popleft()
            kids = rows.shown_children(row_id)
            if not kids or shown + len(kids) > lines:
                continue
            shown += len(kids)
            opened.update(rows.row(row_id).members)
            queue.extend(rows.children(row_id))
        return opened

    def _land_on(self, target: TreeNode) -> None:
        self.move_cursor(target)
        self.scroll_to_node(target, animate=False)

    def _fill(self, branch: TreeNode, row_id: int, start: int, open_path: set[int]) -> None:
        rows = self.rows
        kids = rows.children(row_id)
        page = list(kids[start:start + PAGE])
        page += [k for k in kids[start + PAGE:] if k in open_path]  # the followed node, even past the page
        ghosts = rows.ghosts(row_id) if start == 0 else ()
        for child in page:
            self._add(branch, child, "node", open_path)
        if len(kids) > start + PAGE:
            more = len(kids) - start - PAGE
            branch.add_leaf(f"… {more:,} more (enter to show {min(more, PAGE)})", data=("more", row_id, start + PAGE))
        for ghost in ghosts:
            self._add(branch, ghost, "ghost", open_path)

    def _add(self, branch: TreeNode, row_id: int, kind: str, open_path: set[int]) -> None:
        rows = self.rows
        row = rows.row(row_id)
        has_kids = bool(rows.shown_children(row_id))
        label = row_label(row)
        if kind == "node" and not self.session_frontier.isdisjoint(row.members):
            label.stylize(SESSION_FRONTIER_STYLE)
        elif kind == "node" and not self.session_covered.isdisjoint(row.members):
            label.stylize(SESSION_COVERED_STYLE)
        leaf = branch.add(label, data=(kind, row_id, 0), allow_expand=has_kids)
        if has_kids and any(m in open_path for m in row.members):
            self._fill(leaf, row_id, 0, open_path)
            leaf.expand()

    def _find(self, branch: TreeNode, row_id: int) -> Optional[TreeNode]:
        for child in branch.children:
            if child.data and child.data[0] != "more" and child.data[1] == row_id:
                return child
            found = self._find(child, row_id)
            if found is not None:
                return found
        return None

    def on_tree_node_expanded(self, event: Tree.NodeExpanded) -> None:
        node = event.node
        if node.data and node.data[0] == "node" and self.rows is not None:
            members = self.rows.row(node.data[1]).members
            if not self._auto.issuperset(members):  # the user's, not the redraw's
                self.opened.update(members)
                self.closed.difference_update(members)
        if node.data and node.data[0] in ("node", "ghost") and not node.children and self.rows is not None:
            self._fill(node, node.data[1], 0, set())

    def on_tree_node_collapsed(self, event: Tree.NodeCollapsed) -> None:
        node = event.node
        if node.data and node.data[0] == "node" and self.rows is not None:
            members = self.rows.row(node.data[1]).members
            self.opened.difference_update(members)
            self.closed.update(members)

    def on_tree_node_selected(self, event: Tree.NodeSelected) -> None:
        kind, row_id, start = event.node.data or ("", None, 0)
        if kind == "more":
            parent = event.node.parent
            event.node.remove()
            self._fill(parent, row_id, start, set())
        elif row_id is not None:
            self.post_message(NodeChosen(row_id))

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted) -> None:
        data = event.node.data
        if data and data[0] in ("node", "ghost"):
            self.post_message(NodeChosen(data[1]))
