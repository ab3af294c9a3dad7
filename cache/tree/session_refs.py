"""The session radix cache (v0.5.23's ``--enable-session-radix-cache``): tag what a
finished request of a session left in the tree, per component, so eviction takes
untagged data first, and let go of the tag when the session closes.

``SessionRefTracker`` holds the generations (each open gets the next incarnation
number, so a request opened before a close is recognised as stale), the closed-session
tombstones (a late finish after a close registers nothing) and one
``SessionLeafIndex`` per component: each session's frontier nodes there (the deepest
registered node per cached path, not necessarily a tree leaf) and the ``session_ref``
counts their coverage adds up to. What a frontier covers is the component's
``session_coverage``:

* ``"path"`` (Full): the frontier and every ancestor up to the root;
* ``"window"`` (SWA): the frontier and the ancestors covering the last window plus a
  page, the covered length recorded per frontier so the release walks the same nodes;
* ``"node"`` (Mamba, and the default for any other component, e.g. a per-stride one whose
  entries like a Mamba state each stand for their whole prefix): the frontier only.

A new frontier replaces its nearest registered ancestor (advance); a deleted frontier
hands its tag to its nearest ancestor a match could still end on (recede).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Optional

from ..observe.events import Cause, EventKind

if TYPE_CHECKING:
    from ..basics.request import Req
    from .component_api import TreeAPI, TreeComponentAPI
    from .node import TreeNode

CLOSED_SESSION_TOMBSTONE_LIMIT = 8192  # v0.5.23's bound on remembered closes


class SessionLeafIndex:
    """One component's session frontiers and the coverage their refs add up to."""

    def __init__(self, component: TreeComponentAPI, tree: TreeAPI) -> None:
        self.component = component
        self.tree = tree
        self.index = component.index
        self.coverage = getattr(component, "session_coverage", "node")
        # session -> its frontier nodes, in the order they became frontiers (a dict as an ordered
        # set: a release walks them in that order, the same on every run)
        self.leaves: dict[str, dict[TreeNode, None]] = {}
        self.covered_len: dict[str, dict[TreeNode, int]] = {}  # "window" coverage only
        self.span = 0
        if self.coverage == "window":
            self.span = component.window + tree.page_size

    # ---- coverage -----------------------------------------------------------------
    def _bump(self, node: TreeNode, delta: int, sid: str, cause: Cause) -> None:
        cd = node.data[self.index]
        before = cd.session_ref
        cd.session_ref = before + delta  # below 0 only through a bug: counted on, as v0.5.23 does (session.ref_negative)
        if (before > 0) != (cd.session_ref > 0):
            self._refresh_partition(node)
        tree = self.tree
        if tree._touched is not None:
            tree._touched.add(node.id)
        if tree.events.enabled:
            tree.events.emit(EventKind.SESSION_REF, self.component.name, node.id, cause, 0,
                             f"{sid} {'+' if delta > 0 else '-'}1 -> session_ref={cd.session_ref}")

    def _refresh_partition(self, node: TreeNode) -> None:
        """The ref crossed 0: re-file the node on its new LRU side (device and host)."""
        name = self.component.name
        lru = self.tree.lru.get(name)
        if lru is not None and node in lru:
            lru.promote(node)
        host_lru = getattr(self.tree, "host_lru", None)
        if host_lru and name in host_lru and node in host_lru[name]:
            host_lru[name].promote(node)

    def _walk(self, leaf: TreeNode, stop: Optional[TreeNode], delta: int, sid: str, cause: Cause,
              span: Optional[int] = None) -> int:
        """Add ``delta`` from ``leaf`` upward, short of ``stop`` and the root (and, with
        ``span``, until that many tokens are covered); returns tokens covered."""
        root, node, covered = self.tree.root, leaf, 0
        while node is not None and node is not root and node is not stop:
            if span is not None and covered >= span:
                break
            self._bump(node, delta, sid, cause)
            covered += node.length
            node = node.parent
        return covered

    def _inc(self, sid: str, leaf: TreeNode, cause: Cause) -> None:
        if self.coverage == "window":
            by_leaf = self.covered_len.setdefault(sid, {})
            assert leaf not in by_leaf
            by_leaf[leaf] = self._walk(leaf, None, 1, sid, cause, self.span)
        else:
            self._bump(leaf, 1, sid, cause)

    def _dec(self, sid: str, leaf: TreeNode, cause: Cause) -> None:
        if self.coverage == "path":
            self._walk(leaf, None, -1, sid, cause)
        elif self.coverage == "window":
            by_leaf = self.covered_len[sid]
            covered = by_leaf.pop(leaf)
            if not by_leaf:
                del self.covered_len[sid]
            self._walk(leaf, None, -1, sid, cause, covered)
        else:
            self._bump(leaf, -1, sid, cause)

    def _advance(self, sid: str, leaf: TreeNode, old: Optional[TreeNode], cause: Cause) -> None:
        if self.coverage == "path":  # only the new part of the path gains a ref
            self._walk(leaf, old, 1, sid, cause)
            return
        self._inc(sid, leaf, cause)
        if old is not None:
            self._dec(sid, old, cause)

    def _recede(self, sid: str, leaf: TreeNode, fallback: Optional[TreeNode], cause: Cause) -> None:
        if self.coverage == "path":  # the fallback's own path keeps its ref
            self._walk(leaf, fallback, -1, sid, cause)
            return
        self._dec(sid, leaf, cause)
        if fallback is not None:
            self._inc(sid, fallback, cause)

    # ---- frontier markers ----------------------------------------------------------
    def _mark(self, sid: str, leaf: TreeNode, cause: Cause) -> None:
        self.leaves.setdefault(sid, {})[leaf] = None
        cd = leaf.data[self.index]
        if cd.session_ids is None:
            cd.session_ids = set()
        cd.session_ids.add(sid)
        self._emit_leaf(leaf, cause, f"{sid} marked")

    def _unmark(self, sid: str, leaf: TreeNode, cause: Cause) -> None:
        leaves = self.leaves[sid]
        del leaves[leaf]
        if not leaves:
            del self.leaves[sid]
        cd = leaf.data[self.index]
        cd.session_ids.remove(sid)
        if not cd.session_ids:
            cd.session_ids = None
        self._emit_leaf(leaf, cause, f"{sid} unmarked")

    def _emit_leaf(self, leaf: TreeNode, cause: Cause, detail: str) -> None:
        if self.tree.events.enabled:
            self.tree.events.emit(EventKind.SESSION_LEAF, self.component.name, leaf.id, cause, 0, detail)

    def reusable_ancestor(self, node: Optional[TreeNode]) -> Optional[TreeNode]:
        """The nearest node from ``node`` up a match could end on for this component
        (its validator fed bottom-up, fresh, as v0.5.23 does), or None (the root)."""
        root = self.tree.root
        if node is None or node is root:
            return None
        component = self.component
        validate = (component.create_host_match_validator() if self.tree.host_policy is not None
                    else component.create_match_validator())
        if validate is None:
            return node
        while node is not None and node is not root:
            if validate(node, node.length):
                return node
            node = node.parent
        return None

    def nearest_registered_ancestor(self, sid: str, leaf: TreeNode) -> Optional[TreeNode]:
        current = self.leaves.get(sid, ())
        node = leaf.parent
        while node is not None and node is not self.tree.root:
            if node in current:
                return node
            node = node.parent
        return None

    # ---- the three session events ---------------------------------------------------
    def register(self, sid: str, leaf: Optional[TreeNode]) -> None:
        if leaf is None or leaf is self.tree.root or leaf in self.leaves.get(sid, ()):
            return
        old = self.nearest_registered_ancestor(sid, leaf)
        self._advance(sid, leaf, old, Cause.SESSION)
        self._mark(sid, leaf, Cause.SESSION)
        if old is not None:
            self._unmark(sid, old, Cause.SESSION)

    def release(self, sid: str) -> int:
        leaves = tuple(self.leaves.get(sid, ()))
        for leaf in leaves:
            self._dec(sid, leaf, Cause.SESSION_CLOSE)
            self._unmark(sid, leaf, Cause.SESSION_CLOSE)
        return len(leaves)

    def discard_deleted(self, node: TreeNode) -> None:
        """``node`` leaves the tree: each session marked there recedes to the nearest
        reusable ancestor (unless that is already one of its frontiers)."""
        ancestor = self.reusable_ancestor(node.parent)  # the same for every session marked here
        for sid in sorted(node.data[self.index].session_ids):
            fallback = None if ancestor is not None and ancestor in self.leaves.get(sid, ()) else ancestor
            self._recede(sid, node, fallback, Cause.SESSION)
            self._unmark(sid, node, Cause.SESSION)
            if fallback is not None:
                self._mark(sid, fallback, Cause.SESSION)


def covered_nodes(index: SessionLeafIndex, leaf: TreeNode, covered_len: Optional[int]) -> list[TreeNode]:
    """The nodes one frontier ``leaf`` of a session holds a ref on in ``index``, as the
    index's own walks add them: the leaf alone (``"node"`` coverage), the path to the
    root (``"path"``), or the path until ``covered_len`` tokens (``"window"``: the
    length ``index.covered_len`` recorded for that frontier). For checks that recount
    the refs and for faults that replay a release."""
    root = index.tree.root
    if index.coverage == "node":
        return [leaf]
    out, node, seen = [], leaf, 0
    span = covered_len if index.coverage == "window" else None
    while node is not None and node is not root:
        if span is not None and seen >= span:
            break
        out.append(node)
        seen += node.length
        node = node.parent
    return out


class SessionRefTracker:
    """Generations, closed tombstones and each component's ``SessionLeafIndex``."""

    def __init__(self, tree: TreeAPI, enabled: bool) -> None:
        self.tree = tree
        self.enabled = enabled
        self.reset()

    def reset(self) -> None:
        self.generations: dict[str, int] = {}
        self.incarnation_counter = 0
        self.closed: OrderedDict[str, None] = OrderedDict()  # oldest close first
        self.by_component = {c.name: SessionLeafIndex(c, self.tree) for c in self.tree.components}
        self.last_released: dict[str, int] = {}

    def open_radix_session(self, sid: str) -> int:
        """A new incarnation: an explicit open also forgets an earlier close."""
        self.closed.pop(sid, None)
        self.incarnation_counter += 1
        self.generations[sid] = self.incarnation_counter
        return self.incarnation_counter

    def ensure_session_generation(self, sid: str) -> int:
        generation = self.generations.get(sid)
        return generation if generation is not None else self.open_radix_session(sid)

    def release_radix_session(self, sid: Optional[str]) -> int:
        """Close: remember the close, drop the generation and every tag; returns 0 as
        v0.5.23 does (``last_released`` says how many frontiers each component let go)."""
        self.last_released = {}
        if not self.enabled or sid is None or sid in self.closed:
            return 0
        self.closed[sid] = None
        while len(self.closed) > CLOSED_SESSION_TOMBSTONE_LIMIT:
            self.closed.popitem(last=False)
        self.generations.pop(sid, None)
        self.last_released = {name: index.release(sid) for name, index in self.by_component.items()}
        return 0

    def register_session_ref(self, req: Req, leaf: TreeNode) -> bool:
        """Tag what a finished request's insert ended on, per component (each at its
        nearest reusable node). False when skipped: refs off, no session, a streaming
        session, a closed session, a stale or unknown generation, or the root."""
        if not self.enabled:
            return False
        sid = req.session_id
        if sid is None or req.session_streaming or sid in self.closed:
            return False
        generation = self.generations.get(sid)
        if generation is None or req.session_generation != generation:
            return False
        if leaf is self.tree.root:
            return False
        for index in self.by_component.values():
            index.register(sid, index.reusable_ancestor(leaf))
        return True

    def discard_deleted(self, node: TreeNode) -> None:
        for index in self.by_component.values():
            if node.data[index.index].session_ids:
                index.discard_deleted(node)

    def leaves_of(self, sid: str) -> dict[str, list[int]]:
        """component -> the session's frontier node ids (sorted), components holding none left out."""
        out = {}
        for name, index in self.by_component.items():
            nodes = index.leaves.get(sid)
            if nodes:
                out[name] = sorted(n.id for n in nodes)
        return out


def can_evict_leaf_atomically(component: TreeComponentAPI, node: TreeNode) -> bool:
    """v0.5.23: a component no session holds on ``node`` may not take the whole leaf
    while a component ranked at or above it (internally) still has a session ref there."""
    data = node.data
    if data[component.index].session_ref > 0:
        return True
    rank = component.eviction_priority(False)
    return not any(
        c.eviction_priority(False) >= rank and data[c.index].session_ref > 0 for c in component.tree.components
    )


def session_evict_next(component, batch) -> tuple[Optional[TreeNode], bool]:
    """One step of an LRU component's walk over its session-partitioned list (v0.5.23's
    cursor walk): the cursor starts at the tail and climbs through the unreferenced
    side, then the referenced one; a removed cursor node resumes from the sentinel.
    An evictable leaf goes whole unless a session pins it elsewhere; anything else is
    tombstoned with the cascade."""
    lru = component.tree.lru[component.name]
    x = component._cursor
    if x is not None and x not in lru:
        x = component._cursor = lru.cursor_next()
    if batch.counts[component.name] >= component._evict_request or x is None or x not in lru:
        return None, False
    if x.in_leaf_set and can_evict_leaf_atomically(component, x):
        component._cursor = lru.cursor_next()
        return x, True
    component.tree.tombstone(x, component, batch)
    component._cursor = lru.cursor_next()
    return None, True
