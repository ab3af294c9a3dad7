"""``mamba_max_states_per_path``: SGLang 0.5.23's cap on the Mamba states one
root-to-leaf path keeps (ServerArgs ``--mamba-max-states-per-path``; -1, the default,
is no cap).

An insert that gives a node a new state hands the controller a deferred action
(v0.5.23's ``MambaEvictExcessPathStates``), run after the insert's other actions: it
counts the states from the new one up to the root and, while there are more than the
cap, drops the shallowest device states it may. It spares the new state itself (and
stops there), a state whose Mamba part is locked, a fork (a node with other than one
child: its state serves several paths) and an evictable device leaf, so the cap is
soft: a path may keep more. Only the device state goes (a tombstone, reported with
``Cause.PATH_CAP``); Full KV and a host copy stay.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, ClassVar

from ...observe.actions import ComponentAction
from ...observe.events import Cause

if TYPE_CHECKING:
    from ...tree.node import TreeNode
    from ..base import TreeComponent


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class EvictExcessPathStates(ComponentAction):
    """After an insert gave ``node`` a Mamba state: enforce the per-path cap above it."""

    node: int
    cap: int
    component: ClassVar[str] = "mamba"
    cause: ClassVar[Cause] = Cause.PATH_CAP

    def describe(self) -> str:
        return f"EvictExcessPathStates: keep at most {self.cap} Mamba state(s) on the path to node #{self.node}"


def path_holders(component: TreeComponent, tail: TreeNode) -> list[TreeNode]:
    """The nodes from ``tail`` up to the root (root excluded) holding a device state, deepest first."""
    i, root, out = component.index, component.tree.root, []
    node = tail
    while node is not None and node is not root:
        if node.data[i].value is not None:
            out.append(node)
        node = node.parent
    return out


def cap_spares(component: TreeComponent, node: TreeNode) -> str:
    """Why the cap may not take ``node``'s state ("" when it may)."""
    if node.data[component.index].lock_ref > 0:
        return "locked"
    if len(node.children) != 1:
        return "fork"
    if node.in_leaf_set:
        return "device leaf"
    return ""


def evict_excess_path_states(component: TreeComponent, tail_id: int, cap: int) -> None:
    """The action's work: tombstone the shallowest eligible states above the tail
    until the path is within the cap (or nothing more may go), then free their slots."""
    tree = component.tree
    tail = tree.nodes.get(tail_id)
    if tail is None:
        return
    holders = path_holders(component, tail)
    excess = len(holders) - cap
    if excess <= 0:
        return
    batch = tree.new_eviction(Cause.PATH_CAP)
    batch.detail = f"cap {cap}"
    for node in reversed(holders):
        if excess <= 0 or node is tail:
            break
        if cap_spares(component, node):
            continue
        tree.tombstone(node, component, batch)
        excess -= 1
    component.cache.free_batch(batch, Cause.PATH_CAP)
