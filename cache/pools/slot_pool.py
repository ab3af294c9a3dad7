"""A pool of single slots (one state, one entry each), each recording the fingerprint
of the token prefix it stands for, so a slot copied from the wrong source or filed
under the wrong node shows. Mamba's state pool, and any component's pool of per-slot
entries, add their own tensors on top."""

from __future__ import annotations

import torch

from .allocator import PagedAllocator


class FingerprintedSlotPool:
    def __init__(self, size: int, device: torch.device, name: str) -> None:
        self.allocator = PagedAllocator(size, 1, device, name)
        self.device = device
        self.fingerprint = torch.full((size,), -1, dtype=torch.int64, device=device)

    @property
    def size(self) -> int:
        return self.allocator.size

    def clear(self) -> None:
        self.allocator.clear()
        self.fingerprint.fill_(-1)

    def available_size(self) -> int:
        return self.allocator.available_size()

    def alloc(self, n: int = 1) -> torch.Tensor:
        return self.allocator.alloc(n)

    def free(self, slots: torch.Tensor) -> int:
        return self.allocator.free(slots)
