"""The SWA KV pool: a separate (usually smaller) pool reached through a translation
table from Full slots.

Every Full slot that has live sliding-window KV maps to one SWA slot; -1 means none
(never allocated, or freed because it slid out of the window). Allocating and freeing
go through the table, so the tree and the requests only ever hold Full indices and
the SWA side follows them.

On the CPU the table is read and written through a numpy view of the same tensor
(as the allocator does): the translation is on every Full free, and a torch gather,
mask and scatter on a small index set cost several times more than numpy's.
"""

from __future__ import annotations

import torch

from .allocator import PagedAllocator
from .kv_buffer import KVFingerprintBuffer
from ..basics.numpy_views import host_ints

UNMAPPED = -1


class SWAPool:
    def __init__(self, size: int, full_size: int, page_size: int, device: torch.device, name: str) -> None:
        self.allocator = PagedAllocator(size, page_size, device, name)  # named by its component
        self.buffer = KVFingerprintBuffer(size, device)
        self.full_size = full_size
        self.device = device
        self.mapping = torch.full((full_size,), UNMAPPED, dtype=torch.int64, device=device)
        self._mapping_np = self.mapping.numpy() if self.allocator.on_host else None  # same memory

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
        if self._mapping_np is not None:
            self._mapping_np[full_slots.numpy()] = swa.numpy()
        else:
            self.mapping[full_slots] = swa
        return swa

    def translate(self, full_slots: torch.Tensor) -> torch.Tensor:
        if self._mapping_np is not None:
            return torch.from_numpy(self._mapping_np[full_slots.numpy()])
        return self.mapping[full_slots]

    def free_for(self, full_slots: torch.Tensor) -> int:
        """Free the SWA slots mapped from ``full_slots`` (unmapped ones are skipped)
        and clear their mapping. Returns SWA slots freed."""
        if full_slots.shape[0] == 0:
            return 0
        mapping = self._mapping_np
        if mapping is not None:
            full = full_slots.numpy()
            swa = mapping[full]
            live = torch.from_numpy(swa[swa >= 0])
        else:
            swa = self.mapping[full_slots]
            live = swa[swa >= 0]
        # the table only ever holds slots this pool handed out: no range check
        freed = self.allocator.free(live, trusted=True) if live.shape[0] else 0
        if mapping is not None:
            mapping[full] = UNMAPPED
        else:
            self.mapping[full_slots] = UNMAPPED
        return freed

    def move_mapping(self, kept_full: torch.Tensor, incoming_full: torch.Tensor) -> torch.Tensor:
        """Hand ``incoming_full``'s SWA slots to ``kept_full`` (locked-Full recovery)."""
        swa = self.mapping[incoming_full]
        self.mapping[incoming_full] = UNMAPPED
        self.mapping[kept_full] = swa
        return swa

    def write(self, full_slots: torch.Tensor, fingerprints) -> None:
        """KV (``fingerprints``: a tensor or a host array) for the mapped ones of ``full_slots``."""
        if self._mapping_np is not None:
            swa = self._mapping_np[full_slots.numpy()]
            live = swa >= 0
            self.buffer.write(swa[live], host_ints(fingerprints)[live])
            return
        swa = self.mapping[full_slots]
        live = swa >= 0
        fingerprints = torch.as_tensor(fingerprints, device=self.device)
        self.buffer.write(swa[live], fingerprints[live])
