"""Mamba's part in the host tier (HiCache): a node's state gets a host copy beside its
device one, in a host state pool; a match may end on a state that is on the host
only, and load-back brings just that state (the best node's) back."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    import torch

    from ..tree_node import TreeNode


class MambaHostMixin:
    index: int
    keeps_host_copy = True  # the host tier backs this component up beside Full KV

    def create_host_match_validator(self):
        i = self.index
        return lambda node, length: length == node.length and (
            node.data[i].value is not None or node.data[i].host_value is not None)

    def backup_value(self, node: TreeNode) -> Optional[torch.Tensor]:
        """The device state a backup of ``node`` copies (None: nothing to copy)."""
        cd = node.data[self.index]
        return cd.value if cd.value is not None and cd.host_value is None else None

    def load_back_node(self, best: TreeNode) -> Optional[TreeNode]:
        """The node whose state a load-back brings back: the best match's own, when it
        is on the host only."""
        cd = best.data[self.index]
        return best if cd.value is None and cd.host_value is not None else None
