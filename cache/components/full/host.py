"""Full KV's part in the host tier (HiCache): its host copy across a split, and the
mark of a copy in flight."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...tree.node import ComponentData, TreeNode


class FullHostMixin:
    index: int

    @staticmethod
    def split_host_data(upper: ComponentData, lower: ComponentData, cut: int) -> None:
        """A backed-up (or host-only) node keeps its copy on both parts; both parts are
        in a copy in flight."""
        if lower.host_value is not None:
            host = lower.host_value
            upper.host_value, lower.host_value = host[:cut], host[cut:]
        if "transfer" in lower.metadata:
            upper.metadata["transfer"] = lower.metadata["transfer"]
        for mark in ("store", "prefetching", "publish"):  # a store's or a prefetch's host lock segment grows with
            # the split; a held backup's list of nodes to store gains the upper part
            if mark in lower.metadata:
                upper.metadata[mark] = lower.metadata[mark]

    def node_extras(self, node: TreeNode) -> dict:
        metadata = node.data[self.index].metadata
        transfer = metadata.get("transfer")
        extras = {"transfer": transfer[0]} if transfer is not None else {}
        if "store" in metadata:  # a store to the storage tier in flight (tiers/storage.py)
            extras["store"] = len(metadata["store"])
        if "prefetching" in metadata:  # the anchor of prefetches in flight (tiers/prefetch.py)
            extras["prefetching"] = len(metadata["prefetching"])
        return extras
