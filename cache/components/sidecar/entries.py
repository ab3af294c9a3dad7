"""The sidecar's entries: the pool that holds them (each beside the fingerprint of the
prefix it stands for) and the stride arithmetic that says which node holds which; the
component, its host part and its checks all read them."""

from __future__ import annotations

import torch

from ...pools.slot_pool import FingerprintedSlotPool

ENTRY_WIDTH = 8  # floats per compressed entry: small, but a real tensor on the device


class SidecarPool(FingerprintedSlotPool):
    """Entry slots, each holding a compressed entry and the fingerprint of the prefix
    it stands for (so an entry filed under the wrong boundary shows)."""

    def __init__(self, size: int, device: torch.device) -> None:
        super().__init__(size, device, "sidecar")
        self.entries = torch.zeros((size, ENTRY_WIDTH), dtype=torch.float32, device=device)

    def write(self, slots: torch.Tensor, fingerprints: torch.Tensor) -> None:
        """Store the entries for prefixes with these fingerprints (a stand-in for
        compressing a stride's KV: the entry is filled from the fingerprint)."""
        self.entries[slots] = (fingerprints % 1_000_003).to(torch.float32).unsqueeze(1)
        self.fingerprint[slots] = fingerprints

    def consistent(self, slots: torch.Tensor) -> torch.Tensor:
        return entries_agree(self, slots)


def entries_agree(pool, slots: torch.Tensor) -> torch.Tensor:
    """Per slot of ``pool`` (the device's or the host's): the entry still agrees with
    its recorded fingerprint."""
    expect = (pool.fingerprint[slots] % 1_000_003).to(torch.float32).unsqueeze(1)
    return (pool.entries[slots] == expect).all(1)


def strides_ending_in(start: int, length: int, stride: int) -> int:
    """How many stride boundaries fall in the span (start, start + length]."""
    return (start + length) // stride - start // stride
