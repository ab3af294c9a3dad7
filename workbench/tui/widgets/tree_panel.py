"""The radix tree at the current step: badges per component, the step's changes
highlighted (evicted nodes stay one step as ghosts), single-child chains folded, and
children added only when a node is expanded, a page at a time, so a 10,000-node tree
stays responsive."""

from __future__ import annotations

from typing import Optional

from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from ...model.diff import StateDiff
from ...model.states import TimelineState
from ..messages import NodeChosen
from .badges import node_label

PAGE = 100  # children added per expansion step


class TreePanel(Tree):
    """Nodes carry their node id as data (a chain: its deepest member's id)."""

    def __init__(self, **kwargs) -> None:
        super().__init__("root", **kwargs)
        self.state: Optional[TimelineState] = None
        self.diff: Optional[StateDiff] = None
        self.show_root = True
        self.guide_depth = 3

    def show(self, state: TimelineState, diff: Optional[StateDiff], focus: Optional[int]) -> None:
        """Redraw for a new step, expanding the path to ``focus``."""
        self.state, self.diff = state, diff
        self.clear()
        self.root.set_label(f"root  ({', '.join(state.components)}, page {state.page_size})")
        self.root.data = ("node", state.root_id, 0)
        path = self._path(focus)
        self._fill(self.root, state.root_id, 0, set(path))
        self.root.expand()
        target = self._find(self.root, focus) if focus is not None else None
        if target is not None:  # lines are laid out on the next refresh
            self.call_after_refresh(self._land_on, target)

    def _land_on(self, target: TreeNode) -> None:
        self.move_cursor(target)
        self.scroll_to_node(target, animate=False)

    def _path(self, node_id: Optional[int]) -> list[int]:
        out = []
        state = self.state
        while node_id is not None and node_id in state:
            out.append(node_id)
            node_id = state.record(node_id).parent
        if self.diff is not None and node_id is not None and node_id in self.diff.ghosts:  # a ghost: its old parent
            ghost = self.diff.ghosts[node_id]
            out = [node_id] + self._path(ghost.parent)
        return out

    def _fill(self, branch: TreeNode, node_id: int, start: int, open_path: set[int]) -> None:
        state, diff = self.state, self.diff
        kids = list(state.children(node_id))
        ghosts = [g for g, r in (diff.ghosts.items() if diff else ()) if r.parent == node_id] if start == 0 else []
        page = kids[start:start + PAGE]
        page += [k for k in kids[start + PAGE:] if k in open_path]  # the followed node, even past the page
        for child in page:
            members = self._chain(child)
            bottom = members[-1]
            label = node_label(state.record(child), state.components, self._ranks(child),
                               diff.kinds(child) if diff else frozenset(), len(members) - 1)
            has_kids = bool(state.children(bottom))
            leaf = branch.add(label, data=("node", bottom, 0), allow_expand=has_kids)
            if has_kids and (bottom in open_path or any(m in open_path for m in members)):
                self._fill(leaf, bottom, 0, open_path)
                leaf.expand()
        if len(kids) > start + PAGE:
            more = len(kids) - start - PAGE
            branch.add_leaf(f"… {more:,} more (enter to show {min(more, PAGE)})", data=("more", node_id, start + PAGE))
        for ghost in ghosts:
            record = diff.ghosts[ghost]
            branch.add_leaf(node_label(record, state.components, {}, frozenset({"removed"})), data=("ghost", ghost, 0))

    def _chain(self, node_id: int) -> list[int]:
        """``node_id`` and the single-child run below it whose component states agree
        and that the step did not change."""
        state = self.state
        members = [node_id]
        while True:
            kids = state.children(members[-1])
            if len(kids) != 1 or not self._agree(members[-1], kids[0]):
                return members
            members.append(kids[0])

    def _agree(self, a: int, b: int) -> bool:
        if self.diff is not None and (self.diff.kinds(a) or self.diff.kinds(b)):
            return False
        ra, rb = self.state.record(a), self.state.record(b)
        return all((x.value_len is None) == (y.value_len is None) and x.lock_ref == y.lock_ref and not x.extras
                   and not y.extras for x, y in zip(ra.components, rb.components))

    def _ranks(self, node_id: int) -> dict[str, Optional[int]]:
        record = self.state.record(node_id)
        return {name: self.state.rank(name, record) for name in ("full", *self.state.shape.lru_components)}

    def _find(self, branch: TreeNode, node_id: int) -> Optional[TreeNode]:
        for child in branch.children:
            if child.data and child.data[1] == node_id:
                return child
            found = self._find(child, node_id)
            if found is not None:
                return found
        return None

    def on_tree_node_expanded(self, event: Tree.NodeExpanded) -> None:
        node = event.node
        if node.data and node.data[0] == "node" and not node.children and self.state is not None:
            self._fill(node, node.data[1], 0, set())

    def on_tree_node_selected(self, event: Tree.NodeSelected) -> None:
        kind, node_id, start = event.node.data or ("", None, 0)
        if kind == "more":
            parent = event.node.parent
            event.node.remove()
            self._fill(parent, node_id, start, set())
        elif node_id is not None:
            self.post_message(NodeChosen(node_id))

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted) -> None:
        data = event.node.data
        if data and data[0] in ("node", "ghost"):
            self.post_message(NodeChosen(data[1]))
