"""Mamba's part in the host tier (HiCache): a node's state gets a host copy beside its
device one, in a host state pool; a match may end on a state that is on the host
only, and load-back brings just that state (the best node's) back. In the storage tier
a node's host state is stored under its last page hash; a prefetch fetches the state
at the end of its hit and gives it to the node the fetched pages end at."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base_host import HostPart, hicache_ratio_size

if TYPE_CHECKING:
    import torch

    from ..cache_view import ConfigView
    from ...tree.node import TreeNode


class MambaHostMixin(HostPart):
    index: int
    storage_pool = "mamba"

    @staticmethod
    def default_host_size(config: ConfigView) -> int:
        return hicache_ratio_size(config.mamba_size)  # SGLang: the ratio's share plus one slot

    def make_host_pool(self, size: int):
        from ...pools.host_pool import HostMambaPool

        return HostMambaPool(size, self.name)

    def create_host_match_validator(self):
        i = self.index
        return lambda node, length: length == node.length and (
            node.data[i].value is not None or node.data[i].host_value is not None)

    @property
    def device_store(self):
        """What a host copy is copied from and back into: the state pool."""
        return self.pool

    def backup_nodes(self, node: TreeNode) -> list[TreeNode]:
        """The nodes whose state a backup of ``node`` copies: its own, when the host
        has none of it."""
        cd = node.data[self.index]
        return [node] if cd.value is not None and cd.host_value is None else []

    def load_back_nodes(self, best: TreeNode) -> list[TreeNode]:
        """The nodes whose state a load-back brings back: the best match's own, when
        it is on the host only."""
        cd = best.data[self.index]
        return [best] if cd.value is None and cd.host_value is not None else []

    # A load takes one slot per node whose state it brings back. The request's own slot
    # is taken before, in prepare_load_back, as v0.5.23 takes it.
    def load_shortfall(self, nodes: list[TreeNode], req=None) -> int:
        return len(nodes) - self.pool.available_size()

    def alloc_for_load(self, nodes: list[TreeNode], req=None) -> torch.Tensor:
        return self.pool.alloc(len(nodes))

    def free_load(self, slots: torch.Tensor) -> None:
        self.pool.free(slots)

    def commit_load(self, nodes: list[TreeNode], slots: torch.Tensor, req=None) -> list[torch.Tensor]:
        """Device values for ``nodes`` from the slots a load filled."""
        return [slots[k : k + 1] for k in range(len(nodes))]

    def prepare_load_back(self, best: TreeNode, req):
        """v0.5.23: a request holding no state slot, loading a state that is on the
        host only, gets its slot now (evicting a state when the pool is full); the
        load copies the state into it as well. A key-only load (``load_back`` with no
        request) stands for a request admitted and then dropped: its slot is taken
        the same way and handed back once the load is done. Returns that slot (None:
        none taken)."""
        cd = best.data[self.index]
        if (req is not None and req.mamba_pool_idx is not None) or not (cd.value is None and cd.host_value is not None):
            return None
        slot = self.alloc_slot()  # v0.5.23 asserts where ours refuses (StateSlotsAssertError)
        if req is not None:
            req.mamba_pool_idx = slot
        return slot

    def finalize_load_back(self, req, prep, success: bool) -> None:
        """A load called off: the slot prepared for it goes back, its copy never ran
        (sgl-project/sglang#30986). A key-only load's slot goes back either way."""
        if prep is not None and (req is None or not success):
            self.pool.free(prep)
            if req is not None:
                req.mamba_pool_idx = None

    def after_load(self, nodes: list[TreeNode], req) -> None:
        """The request's own copy of the loaded state (v0.5.23's second Mamba transfer)."""
        if req is not None and req.mamba_pool_idx is not None and nodes:
            self.pool.copy(nodes[-1].data[self.index].value, req.mamba_pool_idx)

    def lock_host_copies(self, anchor: TreeNode):
        self.tree.host_lock(anchor, self, +1)
        return None

    def unlock_host_copies(self, anchor: TreeNode, receipt) -> None:
        self.tree.host_lock(anchor, self, -1)

    # ---- the storage tier ------------------------------------------------------------
    def storage_backup(self, node: TreeNode):
        host = node.data[self.index].host_value
        return ([node.page_hashes[-1]], host) if host is not None and node.page_hashes else None

    def prefetch_trailing_pages(self, anchor: TreeNode, span_pages: int) -> int:
        return 1  # the state at the hit's end

    def commit_prefetch(self, anchor: TreeNode, target: TreeNode, total_len: int, slots):
        if target is None or target.data[self.index].host_value is not None:
            return [slots]
        self.tree.attach_fetched_host(target, self, slots)
        return []
