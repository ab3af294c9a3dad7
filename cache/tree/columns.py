"""Tree nodes as columns, one plain list per field (and the Full slots as one tensor):
built once per sweep of the checker and shared with the components' checks, so each
check is a comprehension over lists or one tensor op (reading node and tensor
attributes again in every check, a torch call per node, dominated the sweep)."""

from __future__ import annotations

import functools
from typing import Optional

import torch


class NodeColumns:
    """``nodes`` as columns: ids, lengths, leaf flags, and per component index its
    ComponentData, values and locks; the Full slots of all of them on first use."""

    def __init__(
        self, nodes: list, num_components: int, device, full_parents: Optional[set] = None, registered: bool = False
    ) -> None:
        self.nodes = nodes
        self.device = device
        self.ids = [n.id for n in nodes]
        self.lengths = [n.length for n in nodes]
        self.in_leaf_set = [n.in_leaf_set for n in nodes]
        datas = [n.data for n in nodes]
        self.data = [[d[i] for d in datas] for i in range(num_components)]  # ComponentData per node
        self.values = [[cd.value for cd in col] for col in self.data]
        self.locks = [[cd.lock_ref for cd in col] for col in self.data]
        self.full_parents = full_parents  # ids of nodes with a child that has Full KV
        self.registered = registered  # exactly the tree's registered non-root nodes

    @classmethod
    def of_tree(cls, tree) -> NodeColumns:
        """Every registered non-root node, in registry order."""
        nodes = [n for n in tree.nodes.values() if n is not tree.root]
        return cls(nodes, len(tree.components), tree.device, registered=True)

    @functools.cached_property
    def full_lengths(self) -> list[int]:
        """Each node's Full value length (0 without one)."""
        return [0 if v is None else v.shape[0] for v in self.values[0]]

    @functools.cached_property
    def full_slots(self) -> torch.Tensor:
        """Every node's Full slots, node after node (one cat)."""
        values = [v for v, n in zip(self.values[0], self.full_lengths) if n]
        if not values:
            return torch.empty(0, dtype=torch.int64, device=self.device)
        return values[0] if len(values) == 1 else torch.cat(values)

    @functools.cached_property
    def full_owner(self) -> torch.Tensor:
        """For each entry of ``full_slots``, the position of its node in ``nodes``."""
        lengths = torch.tensor(self.full_lengths, dtype=torch.int64, device=self.device)
        return torch.repeat_interleave(torch.arange(len(self.nodes), device=self.device), lengths)
