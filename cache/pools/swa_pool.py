"""The SWA KV pool: a separate (usually smaller) pool reached through a translation
table from Full slots.

Every Full slot that has live sliding-window KV maps to one SWA slot; -1 means none
(never allocated, or freed because it slid out of the window). Allocating and freeing
go through the table, so the tree and the requests only ever hold Full indices and
the SWA side follows them.
"""

from __future__ import annotations

import torch

from .allocator import PagedAllocator
from .kv_buffer import KVFingerprintBuffer

UNMAPPED = -1


class SWAPool:
    def __init__(self, size: int, full_size: int, page_size: int, device: torch.device) -> None:
        self.allocator = PagedAllocator(size, page_size, device, "swa")
        self.buffer = KVFingerprintBuffer(size, device)
        self.full_size = full_size
        self.device = device
        self.mapping = torch.full((full_size,), UNMAPPED, dtype=torch.int64, device=device)

    @property
    def size(self) -> int:
        return self.allocator.size

    def clear(self) -> None:
        self.allocator.clear()
        self.mapping.fill_(UNMAPPED)

    def available_size(self) -> int:
        return self.allocator.available_size()

    def alloc_for(self, full_slots: torch.Tensor) -> torch.Tensor:
        """Give each Full slot a fresh SWA slot (positionally, so pages pair up)."""
        swa = self.allocator.alloc(int(full_slots.shape[0]))
        self.mapping[full_slots] = swa
        return swa

    def translate(self, full_slots: torch.Tensor) -> torch.Tensor:
        return self.mapping[full_slots]

    def free_for(self, full_slots: torch.Tensor) -> int:
        """Free the SWA slots mapped from ``full_slots`` (unmapped ones are skipped)
        and clear their mapping. Returns SWA slots freed."""
        if full_slots.shape[0] == 0:
            return 0
        swa = self.mapping[full_slots]
        live = swa[swa >= 0]
        freed = self.allocator.free(live) if live.shape[0] else 0
        self.mapping[full_slots] = UNMAPPED
        return freed

    def move_mapping(self, kept_full: torch.Tensor, incoming_full: torch.Tensor) -> torch.Tensor:
        """Hand ``incoming_full``'s SWA slots to ``kept_full`` (locked-Full recovery)."""
        swa = self.mapping[incoming_full]
        self.mapping[incoming_full] = UNMAPPED
        self.mapping[kept_full] = swa
        return swa

    def write(self, full_slots: torch.Tensor, fingerprints: torch.Tensor) -> None:
        swa = self.mapping[full_slots]
        live = swa >= 0
        self.buffer.write(swa[live], fingerprints[live])
