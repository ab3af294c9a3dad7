"""What a tree view shows at one step: one rule for the TUI's tree panel and the SVG
picture, so both fold, place and mark the same nodes (they used to decide apart, and
drifted: the panel folded across host copies, hid a ghost under a folded node and a
ghost's removed children, and marked neither value nor LRU changes).

**Rows.** A view draws rows: a live node, a folded chain of live nodes, or a ghost.
A row is named by its top member's id; ``members`` lists the nodes it folds.

**Ghosts.** A node the diff removed is drawn once, as a ghost, under its old parent
when that parent is live or itself a ghost (a removed subtree keeps its shape), else
under the root. A ghost never folds.

**Children.** A row's shown children are the live children of its bottom member, in
the tree's child order, then the ghosts under that member, by id.

**Folding.** A row goes on from node ``a`` into ``b`` when ``b`` is ``a``'s only shown
child (ghosts count: a node that lost a child this step ends its row), neither is the
root or a ghost, the step changed neither, and per component they agree: both a value
or both a tombstone, the same lock_ref, the same session_ref, both with a host copy or
both without, and neither has extras (an SWA boundary, a Mamba slot, a host transfer
in flight) nor is a session's frontier (its ``session_ids``: a badge of its own), Full's
eviction policy reads them alike (``policy_badge``), and each LRU rank of ``b`` is next
to ``a``'s, one way all along the row (a path used together: ``r6 r5 r4``, or ``r0 r1``
after a match touched the top). A folded row shows the whole chain's key and token
count, summed value and host-copy lengths, its members' LRU ranks as a range top to
bottom (``r6–4``: every member's rank follows from it) and the evictable-leaf flag,
which only its bottom member can carry (renderers name that member).

**Marks.** A row's change kinds are the diff's for its node (a changed node never
folds, so there is one); ``mark`` is the strongest, in ``CHANGE_ORDER``. Every renderer
styles every kind, and its legend reads ``CHANGE_MEANING``.

**Paths.** ``path(n)``: ``n`` and its ancestors up to the root, passing from a ghost to
its old parent; ``row_of(n)``: the row that shows ``n`` (a view opens the rows of a path
and lands on the row of the node a step is about).

Rows are built on demand and kept, so a view that shows one page of a 10,000-node tree
pays for that page only.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from cache.tree.leaf_policies import hits_text
from cache.basics.keys import TOKEN_BYTES
from cache.observe.views import NodeRecord

from .diff import StateDiff
from .states import TimelineState

CHANGE_ORDER = ("added", "split", "tombstoned", "recovered", "lock_ref", "removed", "value", "lru")  # strongest first
CHANGE_MEANING = {
    "added": "added this step", "split": "split this step", "tombstoned": "a component's data became a tombstone",
    "recovered": "a tombstone got its data back", "lock_ref": "lock_ref changed", "removed": "evicted (ghost, one step)",
    "value": "a value's length changed", "lru": "moved in an LRU order",
}


def strongest(kinds: frozenset[str]) -> Optional[str]:
    """The change kind a view highlights a node by (None: unchanged)."""
    return next((k for k in CHANGE_ORDER if k in kinds), None)


@dataclasses.dataclass(frozen=True)
class ShownComponent:
    name: str
    value_len: Optional[int]  # summed over a chain; None: tombstone
    lock_ref: int
    rank: Optional[int]  # the top member's LRU rank (0 = most recent); None: not ranked, or a ghost
    extras: tuple[tuple[str, object], ...]
    host_len: Optional[int]  # the host tier's copy, summed over a chain; None: none
    session_ref: int = 0  # sessions whose coverage holds it (alike over a chain)
    session_ids: tuple[str, ...] = ()  # sessions whose frontier it is (never folded)
    last_rank: Optional[int] = None  # a folded chain's bottom member's rank (one apart per member)

    @property
    def rank_text(self) -> Optional[str]:
        """``6`` for one node, ``6–1`` for a chain ranked 6, 5, … 1 top to bottom (``0–1``:
        0 then 1); None: not ranked."""
        if self.rank is None:
            return None
        return f"{self.rank}–{self.last_rank}" if self.last_rank not in (None, self.rank) else str(self.rank)


@dataclasses.dataclass(frozen=True)
class ShownNode:
    """One row: a node, a folded chain (``members``, top first) or a ghost."""

    id: int
    members: tuple[int, ...]
    parent: Optional[int]  # the top member's parent (a ghost's: its old parent)
    key: bytes  # the chain's key
    extra_key: Optional[str]
    evictable_leaf: bool
    components: tuple[ShownComponent, ...]
    changes: frozenset[str]
    ghost: bool = False
    cache_salt: Optional[str] = None  # the node's salt (a second namespace)
    key_head: Optional[int] = None  # EAGLE bigram keys: the token the first pair begins with
    policy_badge: str = ""  # what Full's eviction policy reads of it, when it reads more than times

    @property
    def bottom(self) -> int:
        return self.members[-1]

    @property
    def folded(self) -> int:
        """How many nodes below the top the row folds in (``+k``)."""
        return len(self.members) - 1

    @property
    def tokens(self) -> int:
        return len(self.key) // TOKEN_BYTES

    @property
    def mark(self) -> Optional[str]:
        return strongest(self.changes)

    @classmethod
    def of_record(cls, record: NodeRecord, components: tuple[str, ...], ranks: Optional[dict] = None,
                  changes: frozenset[str] = frozenset(), ghost: bool = False, policy: str = "lru") -> ShownNode:
        """One unfolded node (a ghost, or a record shown on its own, as the diff view does)."""
        ranks = ranks or {}
        comps = tuple(ShownComponent(name, c.value_len, c.lock_ref, ranks.get(name), c.extras, c.host_len,
                                     c.session_ref, c.session_ids)
                      for name, c in zip(components, record.components))
        return cls(record.id, (record.id,), record.parent, record.key, record.extra_key, record.evictable_leaf,
                   comps, changes, ghost, record.cache_salt, record.key_head,
                   policy_badge(policy, record.priority, record.hit_count))


def eviction_order_text(state, shown: int = 12) -> str:
    """``full evicts (priority) first: #7 priority 0 · #3 priority 1``: Full's evictable
    leaves, first victim first, with what decides each place; "" under lru (there the
    access order is the whole story)."""
    if state.eviction_policy == "lru":
        return ""
    order = state.evictable_leaves
    listed = " · ".join(f"#{i} {state.node(i).evict_note}".rstrip() for i in order[:shown]) or "nothing"
    more = f" … {len(order) - shown} more" if len(order) > shown else ""
    return f"full evicts ({state.eviction_policy}) first: {listed}{more}"


def policy_badge(policy: str, priority: int, hit_count: int) -> str:
    """``prio 3`` under the priority policy, ``2 hits`` under lfu and slru; "" otherwise."""
    name = policy.split("(", 1)[0]
    if name == "priority":
        return f"prio {priority}"
    if name in ("lfu", "slru"):
        return hits_text(hit_count)
    return ""


def _fold(rows: list[NodeRecord], top: ShownNode, last_ranks: dict[str, Optional[int]]) -> ShownNode:
    """``top`` with the records below it in its chain folded in (``last_ranks``: the bottom
    member's rank per component)."""
    comps = []
    for i, comp in enumerate(top.components):
        value, host = comp.value_len, comp.host_len
        for record in rows:
            below = record.components[i]
            value = None if value is None else value + below.value_len
            host = None if host is None else host + below.host_len
        comps.append(dataclasses.replace(comp, value_len=value, host_len=host, last_rank=last_ranks.get(comp.name)))
    return dataclasses.replace(top, members=top.members + tuple(r.id for r in rows),
                               key=top.key + b"".join(r.key for r in rows), evictable_leaf=rows[-1].evictable_leaf,
                               components=tuple(comps))


class ShownTree:
    """The rows of one state, with a diff's changes and ghosts (``diff`` None: none)."""

    def __init__(self, state: TimelineState, diff: Optional[StateDiff] = None) -> None:
        self.state, self.diff = state, diff
        self.root_id = state.root_id
        self.components = state.components
        self._ghosts = {n: diff.records_before[n] for n in diff.removed} if diff is not None else {}
        self._ghosts_under: dict[int, list[int]] = {}
        for node_id in sorted(self._ghosts):
            parent = self._ghosts[node_id].parent
            if parent not in self._ghosts and (parent is None or parent not in state):
                parent = self.root_id
            self._ghosts_under.setdefault(parent, []).append(node_id)
        self._rows: dict[int, ShownNode] = {}

    # ---- structure -------------------------------------------------------------------------------
    def is_ghost(self, node_id: int) -> bool:
        return node_id in self._ghosts

    def children(self, row_id: int) -> tuple[int, ...]:
        """The live rows under a row (each live child of its bottom member starts one)."""
        return () if row_id in self._ghosts else self.state.children(self._bottom(row_id))

    def ghosts(self, row_id: int) -> tuple[int, ...]:
        """The ghost rows under a row, by id."""
        return tuple(self._ghosts_under.get(self._bottom(row_id), ()))

    def shown_children(self, row_id: int) -> tuple[int, ...]:
        return self.children(row_id) + self.ghosts(row_id)

    def _bottom(self, row_id: int) -> int:
        return row_id if row_id in self._ghosts or row_id == self.root_id else self.row(row_id).bottom

    def row(self, row_id: int) -> ShownNode:
        """The row whose top member is ``row_id`` (built once, then kept)."""
        row = self._rows.get(row_id)
        if row is None:
            row = self._rows[row_id] = self._build(row_id)
        return row

    def _build(self, node_id: int) -> ShownNode:
        if node_id in self._ghosts:
            return ShownNode.of_record(self._ghosts[node_id], self.components, changes=frozenset({"removed"}), ghost=True)
        record = self.state.record(node_id)
        ranks = {name: self.state.rank(name, record) for name in self.components}
        top = ShownNode.of_record(record, self.components, ranks, self._kinds(node_id),
                                  policy=self.state.eviction_policy)
        below, last, way = [], node_id, None
        while (nxt := self._continues_into(last)) is not None:
            step = self._rank_steps(last, nxt)
            if way is not None and step != way:
                break
            below.append(self.state.record(nxt))
            last, way = nxt, step
        if not below:
            return top
        return _fold(below, top, {name: self.state.rank(name, below[-1]) for name in self.components})

    def _kinds(self, node_id: int) -> frozenset[str]:
        return self.diff.kinds(node_id) if self.diff is not None else frozenset()

    def _continues_into(self, node_id: int) -> Optional[int]:
        """The child a row goes on into from ``node_id`` (the folding rule), or None."""
        if node_id == self.root_id or node_id in self._ghosts or self._ghosts_under.get(node_id):
            return None
        kids = self.state.children(node_id)
        if len(kids) != 1 or not self.agree(node_id, kids[0]) or self._rank_steps(node_id, kids[0]) is None:
            return None
        return kids[0]

    def _rank_steps(self, a: int, b: int) -> Optional[tuple]:
        """Per component, how ``b``'s LRU rank steps from ``a``'s (+1, -1, or None when
        neither is ranked); None when they are not next to each other."""
        ra, rb = self.state.record(a), self.state.record(b)
        steps = []
        for name in self.components:
            rank_a, rank_b = self.state.rank(name, ra), self.state.rank(name, rb)
            if (rank_a is None) != (rank_b is None) or rank_a is not None and abs(rank_b - rank_a) != 1:
                return None
            steps.append(None if rank_a is None else rank_b - rank_a)
        return tuple(steps)

    def agree(self, a: int, b: int) -> bool:
        """Two live nodes may share a row: unchanged, and alike per component (their ranks
        are ``_rank_steps``')."""
        if self._kinds(a) or self._kinds(b):
            return False
        state = self.state
        ra, rb = state.record(a), state.record(b)
        policy = state.eviction_policy
        if policy_badge(policy, ra.priority, ra.hit_count) != policy_badge(policy, rb.priority, rb.hit_count):
            return False
        return all((x.value_len is None) == (y.value_len is None) and x.lock_ref == y.lock_ref
                   and (x.host_len is None) == (y.host_len is None) and not x.extras and not y.extras
                   and x.session_ref == y.session_ref and not x.session_ids and not y.session_ids
                   for x, y in zip(ra.components, rb.components))

    # ---- paths -----------------------------------------------------------------------------------
    def parent_of(self, node_id: int) -> Optional[int]:
        if node_id in self._ghosts:
            parent = self._ghosts[node_id].parent
            return parent if parent in self._ghosts or (parent is not None and parent in self.state) else self.root_id
        record = self.state.record(node_id)
        return record.parent if record is not None else None

    def path(self, node_id: Optional[int]) -> list[int]:
        """``node_id`` and its ancestors up to the root (empty for a node not shown)."""
        out: list[int] = []
        while node_id is not None and (node_id in self._ghosts or node_id in self.state):
            out.append(node_id)
            node_id = None if node_id == self.root_id else self.parent_of(node_id)
        return out

    def row_of(self, node_id: int) -> Optional[int]:
        """The row that shows ``node_id``: the top of its chain (None: not shown)."""
        if node_id in self._ghosts or node_id == self.root_id:
            return node_id
        if node_id not in self.state:
            return None
        top = node_id
        while True:  # up to where the chain the node is in starts ...
            parent = self.state.record(top).parent
            if parent is None or self._continues_into(parent) != top:
                break
            top = parent
        while node_id not in self.row(top).members:  # ... then down its rows (a rank turn starts one)
            top = self._continues_into(self.row(top).bottom)
        return top

    def walk(self):
        """Every row, preorder from the root (live children, then ghosts)."""
        stack = [self.root_id]
        while stack:
            row_id = stack.pop()
            yield self.row(row_id)
            stack.extend(reversed(self.shown_children(row_id)))
