"""The Mamba state pool: per slot a conv state and an SSM state tensor.

A state is only valid at the exact token boundary where it was taken, so each slot
also records the fingerprint of the token prefix its state represents; a copy from
the wrong source, or a state filed under the wrong node, shows up as a fingerprint
that does not match the prefix.
"""

from __future__ import annotations

import torch

from ..basics.numpy_views import gather, host_ints
from .slot_pool import FingerprintedSlotPool

CONV_SHAPE = (4, 8)  # small, but real tensors moved on the device
SSM_SHAPE = (2, 8, 8)


class MambaStatePool(FingerprintedSlotPool):
    def __init__(self, size: int, device: torch.device, name: str) -> None:
        super().__init__(size, device, name)  # named by its component
        self.conv = torch.zeros((size, *CONV_SHAPE), dtype=torch.float32, device=device)
        self.ssm = torch.zeros((size, *SSM_SHAPE), dtype=torch.float32, device=device)

    def write(self, slot: torch.Tensor, fingerprint: int) -> None:
        """Store the state reached after a prefix whose fingerprint is given (a stand-in
        for running the SSM: the state tensors are filled from the fingerprint)."""
        value = float(fingerprint % 1_000_003)
        if self.conv.device.type == "cpu":  # through numpy views: one small torch index_put costs several
            index = slot if type(slot) is int else host_ints(slot)
            self.conv.numpy()[index] = value
            self.ssm.numpy()[index] = -value
            self.fingerprint.numpy()[index] = fingerprint
            return
        self.conv[slot] = value
        self.ssm[slot] = -value
        self.fingerprint[slot] = fingerprint

    def copy(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Copy-on-write: duplicate a state on the device."""
        self.conv[dst] = self.conv[src]
        self.ssm[dst] = self.ssm[src]
        self.fingerprint[dst] = self.fingerprint[src]

    def fingerprint_of(self, slot: torch.Tensor) -> int:
        return int(gather(self.fingerprint, host_ints(slot).reshape(-1)[:1])[0])  # read on the host

    def consistent(self, slot: torch.Tensor) -> bool:
        """The state tensors still agree with the recorded fingerprint."""
        fp = self.fingerprint_of(slot)
        expect = float(fp % 1_000_003)
        s = int(slot.reshape(-1)[0])
        return bool((self.conv[s] == expect).all()) and bool((self.ssm[s] == -expect).all())
