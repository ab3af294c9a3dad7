"""A compressed-KV sidecar: one entry per ``stride`` tokens, in the spirit of SGLang's C128.

Some attention variants keep, next to the per-token KV, one compressed entry per block
of ``stride`` tokens (128 for C128). Entry i is taken once tokens [i*stride,
(i+1)*stride) are all computed, so the tree keeps it on the node where that stride
ends (the node whose span holds token (i+1)*stride - 1): a node holds the entries of
every stride ending in its span, or none (sidecar:✝). Like a Mamba state, an entry
stands for the whole prefix up to its boundary, so a match may end only on a stride
boundary whose entry is held, a lock pins the entries of the node a match ended on,
and requests are cached up to whole strides. A split hands the upper node the
entries of the strides ending above the cut. Eviction ranks between SWA and Mamba:
evicting SWA (or Full) takes the entries along, evicting entries takes Mamba's state.

This file, its entries (entries.py), its checks (checks.py), its part in the host tier
(host.py) and its name in the registry are the whole component: nothing else in the
cache names it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, ClassVar, Optional

import torch

from ...observe.actions import ComponentAction
from ...observe.events import Cause, EventKind
from ...observe.views import PoolView
from ...basics.keys import unpack_tokens
from ...basics.params import EvictParams
from ...pools.kv_buffer import prefix_fingerprints
from ..anchor_lock import AnchorLockMixin
from ..base import LRUEvictionMixin, TreeComponent
from ..own_pool import OwnPoolMixin
from .entries import SidecarPool, strides_ending_in
from .host import SidecarHostMixin

if TYPE_CHECKING:
    from ...observe.eviction_batch import EvictionBatch
    from ...tree.node import TreeNode


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class AttachSidecarEntries(ComponentAction):
    """Give ``nodes`` (top-down, on the path to ``node``, where an insert ended) the
    entries of the strides ending in their spans; the pool is the controller's."""

    node: int
    nodes: tuple[int, ...]
    component: ClassVar[str] = "sidecar"

    def describe(self) -> str:
        ids = ", ".join(f"#{n}" for n in self.nodes)
        return f"AttachSidecarEntries: node(s) {ids} take the entries of their whole strides"


class SidecarComponent(SidecarHostMixin, AnchorLockMixin, OwnPoolMixin, LRUEvictionMixin, TreeComponent):
    name = "sidecar"
    uses_lru = True
    leaf_priority = 0
    internal_priority = 0.5  # between SWA (1) and Mamba (0)
    sets_checkpoints = True  # requests are cached up to whole strides
    config_fields = {"sidecar_stride": 128, "sidecar_size": None}
    config_docs = {"sidecar_stride": ("128", "this workbench (the example component)", "tokens between two sidecar entries"),
                   "sidecar_size": ("required with its component", "this workbench (the example component)",
                                    "sidecar entry slots")}

    def __init__(self, cache, index: int) -> None:
        super().__init__(cache, index)
        self.stride = self.config_value("sidecar_stride")
        self.pool = SidecarPool(self.config_value("sidecar_size"), cache.device)

    # ---- inspection -------------------------------------------------------
    def value_len(self, node: TreeNode) -> int:
        cd = node.data[self.index]
        value = cd.value if cd.value is not None else cd.host_value  # the host tier's copy counts alike
        return 0 if value is None else int(value.shape[0])

    def node_extras(self, node: TreeNode) -> dict:
        value = node.data[self.index].value
        return {"entries": int(value.shape[0])} if value is not None else {}

    def _path(self, node: TreeNode) -> list[TreeNode]:
        """The nodes from below the root down to ``node``."""
        path, root = [], self.tree.root
        while node is not root:
            path.append(node)
            node = node.parent
        path.reverse()
        return path

    def path_start(self, node: TreeNode) -> int:
        """Tokens on the path above ``node`` (where its span starts)."""
        start, node = 0, node.parent
        while node is not None:
            start += node.length
            node = node.parent
        return start

    # ---- match ------------------------------------------------------------
    def create_match_validator(self):
        i, stride, walked = self.index, self.stride, [0]

        def validate(node: TreeNode, length: int) -> bool:
            walked[0] += length
            return walked[0] % stride == 0 and node.data[i].value is not None

        return validate

    def match_verdict(self, path):
        i, stride = self.index, self.stride
        best, best_tokens, total = -1, 0, 0
        for k, node in enumerate(path):
            total += node.length
            if total % stride == 0 and node.data[i].value is not None:
                best, best_tokens = k, total
        if best == len(path) - 1:
            return best, f"entry for the stride ending at token {total}"
        if total % stride:
            why = f"{total} tokens is not a whole number of strides ({stride})"
        else:
            why = f"node #{path[-1].id} holds no entry for the stride ending at token {total}"
        if best < 0:
            return best, f"no held stride boundary on the path; {why}"
        return best, f"nearest held stride boundary at node #{path[best].id} ({best_tokens} tokens); {why}"

    # ---- insert: entries for the whole strides the insert computed ----------
    def commit_insert(self, node, is_new_leaf, params, result, actions) -> None:
        """Every node on the path that has strides ending in it but no entries, below
        what the inserting request matched (it computed those tokens), gets entries."""
        path = self._path(node)
        start, missing = 0, []
        for cur in path:
            if (start >= params.prev_prefix_len and cur.data[self.index].value is None
                    and strides_ending_in(start, cur.length, self.stride)):
                missing.append(cur.id)
            start += cur.length
        if missing:
            actions.append(AttachSidecarEntries(path[-1].id, tuple(missing)))

    def apply_action(self, action) -> None:
        if not isinstance(action, AttachSidecarEntries):
            return super().apply_action(action)
        tree, stride = self.tree, self.stride
        anchor = tree.nodes.get(action.node)
        if anchor is None:
            return
        path = self._path(anchor)
        starts, start = {}, 0
        for node in path:
            starts[node.id] = start
            start += node.length
        todo = [(tree.nodes[n], starts[n]) for n in action.nodes if n in starts]
        counts = [strides_ending_in(start, n.length, stride) for n, start in todo]
        short = sum(counts) - self.pool.available_size()
        if short > 0 and self.cache.auto_evict:
            self._evict_around(anchor, short)
        tokens = unpack_tokens(b"".join(node.key for node in path))
        fps = prefix_fingerprints(tokens, self.pool.device)
        for (node, start), count in zip(todo, counts):
            if count > self.pool.available_size():
                break  # best effort: the deeper strides go without entries
            first = (start // stride + 1) * stride
            ends = torch.arange(first, start + node.length + 1, stride, device=self.pool.device)
            slots = self.pool.alloc(count)
            self.pool.write(slots, fps[ends - 1])
            tree.set_component_value(node.id, self.name, slots)

    def _evict_around(self, anchor: TreeNode, short: int) -> None:
        """Evict ``short`` entries elsewhere, the path to ``anchor`` held by a Full (and
        sidecar) lock meanwhile so eviction cannot delete the nodes waiting for them."""
        tree = self.tree
        others = tuple(c.name for c in tree.components[1:] if c is not self)
        receipt = tree.inc_lock_ref(anchor.id, others)
        try:
            self.cache.evict_for_alloc(EvictParams.of({self.name: short}))
        finally:
            tree.dec_lock_ref(anchor.id, receipt)

    # ---- split: entries of the strides ending above the cut move up --------
    def redistribute_on_split(self, new_parent: TreeNode, child: TreeNode) -> None:
        lower = child.data[self.index]
        if lower.value is None and lower.host_value is None:
            return
        k = strides_ending_in(self.path_start(new_parent), new_parent.length, self.stride)
        if k and lower.value is not None:
            self._move_entries_up(new_parent, child, k)
        if k and lower.host_value is not None:
            self.split_host_copies(new_parent, child, k)  # host.py

    def _move_entries_up(self, new_parent: TreeNode, child: TreeNode, k: int) -> None:
        i, tree = self.index, self.tree
        lower, upper = child.data[i], new_parent.data[i]
        value = lower.value
        upper.value = value[:k]
        if lower.lock_ref > 0:  # the lock stays below: the moved entries become evictable
            tree.protected[i] -= k
            tree.evictable[i] += k
        if k < value.shape[0]:
            lower.value = value[k:]
            return
        lower.value = None  # every entry moved up: the upper node takes the lower's LRU place
        lru = tree.lru[self.name]
        lru.insert_after(child, new_parent)
        lru.remove(child)

    # ---- eviction ---------------------------------------------------------
    def evict_component(self, node: TreeNode, batch: EvictionBatch) -> int:
        value = node.data[self.index].value
        if value is None:
            return 0
        n = int(value.shape[0])
        batch.free(self.name, value, n)
        self.tree.evictable[self.index] -= n
        return n

    # locks: AnchorLockMixin (this node only, never the root)

    # ---- requests ---------------------------------------------------------
    def prepare_for_caching_req(self, req, params, length: int, finished: bool) -> Optional[int]:
        return self.caching_len(req, length, finished)

    def caching_len(self, req, length: int, finished: bool) -> Optional[int]:
        """Cache whole strides only: a partial one has no entry to end a match on.
        Unless another component's checkpoints decide the length (Mamba's state is
        taken for exactly that length): then entries cover the whole strides it has."""
        if any(c.sets_checkpoints for c in self.tree.components if c is not self):
            return None
        return length - length % self.stride

    # ---- pool -------------------------------------------------------------
    def pool_views(self) -> dict:
        i, pool = self.index, self.pool
        return {self.name: PoolView(self.name, pool.size, pool.available_size(), self.tree.evictable[i], self.tree.protected[i], 0)}

    def free_device_values(self, values: list[torch.Tensor], cause: Cause, node: Optional[int]) -> None:
        freed = self.pool.free(values[0] if len(values) == 1 else torch.cat(values))
        if freed:
            self._emit(EventKind.FREE, None, cause, freed, f"pool={self.name}")
