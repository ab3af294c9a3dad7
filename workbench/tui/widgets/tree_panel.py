"""The radix tree at the current step, as ``model.shown_tree`` lays it out (the same rows
the SVG picture draws): badges per component, the step's changes marked, evicted nodes
shown once as ghosts, single-child chains folded. Children are added only when a row
is expanded, a page at a time, so a 10,000-node tree stays responsive. With a session
highlighted (the sessions panel) the rows holding its nodes are highlighted too: its
frontier nodes strongly, the rest of its coverage lightly.

A new step does not rebuild the tree: the rows already drawn are matched to the new
ones by id, and only rows whose content changed are relabelled, only rows that came
or went are added or removed. What the user opened or closed, and the pages of
children they asked for, are kept; beyond the path to the selected node, rows open
breadth first as far as the panel's height fits them, so a step that names no node
does not fold the tree away."""

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
        self.pages: dict[int, int] = {}  # row id -> children shown, where the user asked for more
        self.drawn: dict[int, tuple] = {}  # row id -> what its label was drawn from
        self.relabelled = 0  # rows the last redraw relabelled (the rest were left as drawn)
        self._open: set[int] = set()  # node ids whose rows the current redraw keeps open
        self._ours: set[int] = set()  # tree-node ids the redraw expanded or collapsed (their events are not the user's)
        self._row_nodes: dict[int, TreeNode] = {}  # row id -> its tree node, for rows drawn
        self._chapter: Optional[int] = None  # node ids name other nodes in another chapter

    def show(self, view: StepView) -> None:
        """Bring the drawn rows to a new step, opening the rows on the path to the
        selected node."""
        if view.chapter_index != self._chapter:
            self._chapter = view.chapter_index
            self.opened, self.closed, self.pages = set(), set(), {}
        rows = self.rows = view.tree
        state = view.state
        chosen = view.chosen_session
        self.session_frontier = chosen.frontier_nodes if chosen is not None else frozenset()
        self.session_covered = chosen.covered_nodes if chosen is not None else frozenset()
        label = f"root  ({', '.join(state.components)}, page {state.page_size})"
        if str(self.root.label) != label:
            self.root.set_label(label)
        self.root.data = ("node", rows.root_id, 0)
        open_path = set(rows.path(view.selected))
        for node_id in sorted(self.session_frontier)[:SESSION_PATHS_OPENED]:  # the chosen session's frontier in view
            open_path.update(rows.path(node_id))
        fitting = self._fitting(rows, max(self.size.height, 12)) - self.closed
        self._open = open_path | fitting | self.opened
        self.relabelled, self._row_nodes = 0, {rows.root_id: self.root}
        self._sync_children(self.root, rows.root_id)
        if not self.root.is_expanded:
            self._ours.add(self.root.id)
            self.root.expand()
        self.drawn = {row_id: self.drawn[row_id] for row_id in self._row_nodes if row_id in self.drawn}
        row = rows.row_of(view.selected) if view.selected is not None else None
        target = self._row_nodes.get(row) if row is not None else None
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

    # ---- bringing drawn rows to the step -------------------------------------------------------------
    def _wanted(self, row_id: int) -> tuple[list[tuple[str, int]], Optional[tuple[int, int]]]:
        """The children a row shows: ``(kind, row id)`` in order, and the "more" entry
        ``(start, hidden)`` when a page leaves some out (the row on the open path is
        shown even past the page)."""
        rows, opened = self.rows, self._open
        kids = rows.children(row_id)
        shown = self.pages.get(row_id, PAGE)
        wanted = [("node", k) for k in kids[:shown]]
        wanted += [("node", k) for k in kids[shown:] if k in opened]
        wanted += [("ghost", g) for g in rows.ghosts(row_id)]
        hidden = len(kids) - shown
        return wanted, ((shown, hidden) if hidden > 0 else None)

    def _sync_children(self, branch: TreeNode, row_id: int) -> None:
        """Make ``branch``'s children the row's: keep the tree nodes of rows still
        there (relabelled when they changed), remove those gone, add those new."""
        wanted, more = self._wanted(row_id)
        keep = set(wanted)
        more_leaf = None
        for child in list(branch.children):
            kind, child_id, _ = child.data
            if kind == "more" and more is not None and more_leaf is None:
                more_leaf = child  # kept, relabelled below
            elif kind == "more" or (kind, child_id) not in keep:
                child.remove()
        current = {(c.data[0], c.data[1]): c for c in branch.children if c is not more_leaf}
        order = [key for key in wanted if key in current]
        if order != [(c.data[0], c.data[1]) for c in branch.children if c is not more_leaf]:  # rows moved
            branch.remove_children()
            current, more_leaf = {}, None
        for index, (kind, child_id) in enumerate(wanted):
            node = current.get((kind, child_id))
            if node is None:
                node = self._add(branch, child_id, kind, index)
            else:
                self._update(node, child_id, kind)
            self._row_nodes[child_id] = node
            self._sync_open(node, child_id)
        if more is not None:
            start, hidden = more
            label = f"… {hidden:,} more (enter to show {min(hidden, PAGE)})"
            if more_leaf is None:
                branch.add_leaf(label, data=("more", row_id, start))
            else:
                more_leaf.data = ("more", row_id, start)
                if str(more_leaf.label) != label:
                    more_leaf.set_label(label)

    def _signature(self, row_id: int, kind: str) -> tuple:
        row = self.rows.row(row_id)
        session = "" if kind != "node" else (
            "frontier" if not self.session_frontier.isdisjoint(row.members)
            else "covered" if not self.session_covered.isdisjoint(row.members) else "")
        return row, session

    def _label(self, signature: tuple):
        row, session = signature
        label = row_label(row)
        if session:
            label.stylize(SESSION_FRONTIER_STYLE if session == "frontier" else SESSION_COVERED_STYLE)
        return label

    def _add(self, branch: TreeNode, row_id: int, kind: str, index: int) -> TreeNode:
        signature = self._signature(row_id, kind)
        self.drawn[row_id] = signature
        self.relabelled += 1
        has_kids = bool(self.rows.shown_children(row_id))
        return branch.add(self._label(signature), data=(kind, row_id, 0), allow_expand=has_kids, before=index)

    def _update(self, node: TreeNode, row_id: int, kind: str) -> None:
        signature = self._signature(row_id, kind)
        if self.drawn.get(row_id) != signature:
            self.drawn[row_id] = signature
            self.relabelled += 1
            self._relabel(node, self._label(signature))
        has_kids = bool(self.rows.shown_children(row_id))
        if node.allow_expand != has_kids:
            node.allow_expand = has_kids

    def _relabel(self, node: TreeNode, label) -> None:
        """``set_label``, without its one deferred repaint callback per node: every row
        of a page is relabelled on most steps (an insert moves every LRU rank), and 100
        callbacks cost more than the rest of the redraw. ``TreeNode.refresh`` repaints the
        row's line now (tests/render/test_tree_panel_updates.py checks the painted line follows)."""
        node._label = self.process_label(label)
        node.refresh()

    def _sync_open(self, node: TreeNode, row_id: int) -> None:
        """Open the row when the redraw keeps it open (its children brought to the step),
        else fold it and drop its drawn children (drawn afresh when it opens)."""
        members = self.rows.row(row_id).members
        if node.allow_expand and not self._open.isdisjoint(members):
            self._sync_children(node, row_id)
            if not node.is_expanded:
                self._ours.add(node.id)
                node.expand()
        elif node.children:
            if node.is_expanded:
                self._ours.add(node.id)
                node.collapse()
            node.remove_children()

    # ---- the user's hands ----------------------------------------------------------------------------
    def _toggled_by_hand(self, node, opened: bool) -> bool:
        """Remember a node the user opened or closed (not one this panel toggled
        itself), for every tree node its row stands for; False for the panel's own."""
        if node.id in self._ours:
            self._ours.discard(node.id)
            return False
        if node.data and node.data[0] == "node" and self.rows is not None:
            members = self.rows.row(node.data[1]).members
            now, before = (self.opened, self.closed) if opened else (self.closed, self.opened)
            now.update(members)
            before.difference_update(members)
            if opened:
                self._open.update(members)
            else:
                self._open.difference_update(members)
        return True

    def on_tree_node_expanded(self, event: Tree.NodeExpanded) -> None:
        node = event.node
        if self._toggled_by_hand(node, opened=True) and node.data and node.data[0] in ("node", "ghost") \
                and not node.children and self.rows is not None:
            self._sync_children(node, node.data[1])

    def on_tree_node_collapsed(self, event: Tree.NodeCollapsed) -> None:
        self._toggled_by_hand(event.node, opened=False)

    def on_tree_node_selected(self, event: Tree.NodeSelected) -> None:
        kind, row_id, start = event.node.data or ("", None, 0)
        if kind == "more":
            self.pages[row_id] = start + PAGE
            parent = event.node.parent
            self._sync_children(parent, row_id)
        elif row_id is not None:
            self.post_message(NodeChosen(row_id))

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted) -> None:
        data = event.node.data
        if data and data[0] in ("node", "ghost"):
            self.post_message(NodeChosen(data[1]))
