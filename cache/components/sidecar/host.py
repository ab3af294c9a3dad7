"""The sidecar's part in the host tier (HiCache): a node's compressed entries get a host
copy beside the device ones, in a host entry pool (``host_sidecar_size`` entries, by
default twice the device pool plus one, as SGLang sizes a state pool).

Like a Mamba state, an entry stands for its whole prefix: a match may end on a stride
boundary whose entry is on the host only, a backup copies a node's own entries, and a
load-back brings back just the best match's (host-locked while it is read). A split
hands the upper node the host copies of the strides ending above the cut, as it does
the device ones. Host eviction ranks the sidecar as device eviction does: between SWA
and Mamba. Its checks are checks.py's (``check_host``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base_host import HostPart, hicache_ratio_size

if TYPE_CHECKING:
    import torch

    from ..cache_view import ConfigView
    from ...tree.node import TreeNode

HOST_TENSORS = ("entries", "fingerprint")  # what a host entry slot keeps of a device one


class SidecarHostMixin(HostPart):
    index: int
    stride: int

    @staticmethod
    def default_host_size(config: ConfigView) -> int:
        entries = config.extra.get("sidecar_size")  # checked with the component's fields when the cache is built
        return hicache_ratio_size(entries) if type(entries) is int and entries > 0 else 1

    def make_host_pool(self, size: int):
        from ...pools.host_pool import HostSlotPool

        return HostSlotPool(self.pool, HOST_TENSORS, size, "sidecar_host")

    @property
    def device_store(self):
        return self.pool

    def create_host_match_validator(self):
        i, stride, walked = self.index, self.stride, [0]

        def validate(node: TreeNode, length: int) -> bool:
            walked[0] += length
            cd = node.data[i]
            return walked[0] % stride == 0 and (cd.value is not None or cd.host_value is not None)

        return validate

    # ---- backup and load-back: a node's own entries ---------------------------------
    def backup_nodes(self, node: TreeNode) -> list[TreeNode]:
        cd = node.data[self.index]
        return [node] if cd.value is not None and cd.host_value is None else []

    def load_back_nodes(self, best: TreeNode) -> list[TreeNode]:
        cd = best.data[self.index]
        return [best] if cd.value is None and cd.host_value is not None else []

    def load_shortfall(self, nodes: list[TreeNode], req=None) -> int:
        return sum(self.value_len(n) for n in nodes) - self.pool.available_size()

    def alloc_for_load(self, nodes: list[TreeNode], req=None) -> torch.Tensor:
        return self.pool.alloc(sum(self.value_len(n) for n in nodes))

    def free_load(self, slots: torch.Tensor) -> None:
        self.pool.free(slots)

    def commit_load(self, nodes: list[TreeNode], slots: torch.Tensor, req=None) -> list[torch.Tensor]:
        values, start = [], 0
        for node in nodes:
            n = self.value_len(node)
            values.append(slots[start : start + n])
            start += n
        return values

    def lock_host_copies(self, anchor: TreeNode):
        self.tree.host_lock(anchor, self, +1)

    def unlock_host_copies(self, anchor: TreeNode, receipt) -> None:
        self.tree.host_lock(anchor, self, -1)

    # ---- split ------------------------------------------------------------------------
    def split_host_copies(self, new_parent: TreeNode, child: TreeNode, k: int) -> None:
        """The upper node takes the host copies of the ``k`` strides ending above the
        cut; a host-only upper half joins the host LRU just behind the lower one (the
        host lock stays below, as the device lock does)."""
        upper, lower = new_parent.data[self.index], child.data[self.index]
        host = lower.host_value
        upper.host_value, lower.host_value = host[:k], (host[k:] if k < host.shape[0] else None)
        lru = self.tree.host_lru[self.name]
        if upper.value is None and child in lru:
            lru.insert_after(child, new_parent)
        self.tree.refresh_host_lru(new_parent, self)
        self.tree.refresh_host_lru(child, self)
