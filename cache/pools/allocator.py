"""A page-granular slot allocator with a free list on the device.

Slots are token positions in a KV pool; pages are ``page_size`` consecutive slots and
are what is really handed out and taken back. The free list is a stack in a
preallocated tensor, and a per-page ownership count catches double frees (across or
within one call) before anything changes.

On the CPU the same tensors are worked through numpy views of their memory: a
thousand-index free is then a few numpy calls (about 1 µs each) instead of torch
calls (about 4 µs each), and a free is the cache's most frequent pool call. Both
paths keep the same state in the same tensors and report the same errors.
"""

from __future__ import annotations

import numpy as np
import torch

from ..basics.base_component import FULL
from ..basics.errors import DoubleFreeError, ForeignIndexError, PoolError, PoolExhaustedError
from ..basics.numpy_views import gather, host_ints


class PagedAllocator:
    def __init__(self, size: int, page_size: int, device: torch.device, name: str = FULL) -> None:
        if size <= 0 or page_size <= 0 or size % page_size:
            raise ValueError(f"{name} pool size {size} must be a positive multiple of page_size {page_size}")
        self.name = name
        self.size = size
        self.page_size = page_size
        self.num_pages = size // page_size
        self.device = device
        self._offsets = torch.arange(page_size, dtype=torch.int64, device=device)
        self._ones = torch.ones(self.num_pages, dtype=torch.int32, device=device)
        self.on_host = torch.device(device).type == "cpu"  # work through numpy views
        self.clear()

    def clear(self) -> None:
        """Every page free again."""
        self._stack = torch.arange(self.num_pages - 1, -1, -1, dtype=torch.int64, device=self.device)
        self._top = self.num_pages  # stack[:top] are free pages; pops come from the top
        self._owned = torch.zeros(self.num_pages, dtype=torch.int32, device=self.device)
        if self.on_host:  # views of the same memory, not copies
            self._stack_np, self._owned_np = self._stack.numpy(), self._owned.numpy()
            # a free marks the i-th page it names -(i + 1): a page named twice keeps only its later mark
            self._marks_np = np.arange(-1, -self.num_pages - 1, -1, dtype=np.int32)

    def available_size(self) -> int:
        """Free slots (whole pages)."""
        return self._top * self.page_size

    def pages_for(self, num_slots: int) -> int:
        return -(-num_slots // self.page_size)

    def alloc(self, num_slots: int) -> torch.Tensor:
        """``num_slots`` slot indices on fresh pages (the last page may be part-used)."""
        if type(num_slots) is not int or num_slots < 0:
            raise PoolError(f"{self.name} pool: cannot allocate {num_slots!r} slots (need a non-negative int)")
        need = self.pages_for(num_slots)
        if need > self._top:
            raise PoolExhaustedError(
                f"{self.name} pool exhausted: need {need * self.page_size} slots, {self.available_size()} free"
            )
        top = self._top
        if self.on_host:
            taken = self._stack_np[top - need : top][::-1].copy()
            self._owned_np[taken] = 1
            pages = torch.from_numpy(taken)
        else:
            pages = self._stack[top - need : top].flip(0)
            self._owned.index_fill_(0, pages, 1)
        self._top = top - need
        if self.page_size == 1:
            return pages
        return (pages[:, None] * self.page_size + self._offsets).reshape(-1)[:num_slots]

    def page_ids(self, indices: torch.Tensor) -> torch.Tensor:
        """Pages touched by ``indices`` (each once, in first-seen order for page-aligned runs)."""
        if self.page_size == 1:
            return indices
        return torch.unique(torch.div(indices, self.page_size, rounding_mode="floor"))

    def free(self, indices: torch.Tensor, trusted: bool = False) -> int:
        """Return the pages holding ``indices``; returns the number of slots freed.
        ``trusted``: indices whose form and range were checked before the tree kept them
        (a node's at eviction, an insert's duplicates), so those checks are skipped; the
        double-free check always runs."""
        if self.on_host:
            return self._free_on_host(indices, trusted)
        if not trusted:  # checked first on both paths: an empty tensor of the wrong form is refused too
            self.check_foreign(indices)
        if indices.shape[0] == 0:
            return 0
        pages = self.page_ids(indices)
        k = pages.shape[0]
        ones = self._ones[:k]
        owned = self._owned
        owned.index_add_(0, pages, ones, alpha=-1)
        if int(owned.index_select(0, pages).min()) < 0:
            owned.index_add_(0, pages, ones)  # undo: leave the pool as it was
            raise DoubleFreeError(f"{self.name} pool: double free of slot(s) {self._already_free(indices)}")
        top = self._top
        self._stack[top : top + k] = pages
        self._top = top + k
        return k * self.page_size

    def _free_on_host(self, indices: torch.Tensor, trusted: bool) -> int:
        """``free`` through numpy, in one array: every page must be owned (none already
        free) and, at page 1, named once, checked before anything is left changed. A
        free page holds 0 or a negative mark; at page 1 the marks written in order
        show a page named twice (it keeps the later one), and the owned counts read
        first put the pool back."""
        if not trusted:
            self._check_tensor(indices)
        pages = indices.numpy()
        if pages.shape[0] == 0:
            return 0
        if not trusted and not self._host_ids_in_range(pages):
            self._refuse_range(indices)
        owned = self._owned_np
        if self.page_size > 1:  # deduplicated: a page named twice is freed once
            pages = np.unique(pages // self.page_size)
            if owned[pages].min() < 1:
                raise DoubleFreeError(f"{self.name} pool: double free of slot(s) {self._already_free(indices)}")
            owned[pages] = 0
        else:
            held = owned[pages]
            if held.min() < 1:
                raise DoubleFreeError(f"{self.name} pool: double free of slot(s) {self._already_free(indices)}")
            marks = self._marks_np[: pages.shape[0]]
            owned[pages] = marks
            if (owned[pages] != marks).any():
                owned[pages] = held  # undo: leave the pool as it was
                raise DoubleFreeError(f"{self.name} pool: double free of slot(s) {self._already_free(indices)}")
        k = pages.shape[0]
        top = self._top
        self._stack_np[top : top + k] = pages
        self._top = top + k
        return k * self.page_size

    def check_foreign(self, indices: torch.Tensor) -> None:
        """Refuse indices this pool cannot have handed out (dtype, shape, device, range)."""
        self._check_tensor(indices)
        if not self.holds_ids(indices):
            self._refuse_range(indices)

    def holds_ids(self, slots: torch.Tensor) -> bool:
        """Every id in ``slots`` (a 1-D int64 tensor on the pool's device) lies in the
        pool. The tree asks this of an insert's value before it keeps the ids, so their
        frees (of duplicates at once, the rest at eviction) take the range as checked."""
        if self.on_host:
            return self._host_ids_in_range(slots.numpy())
        if slots.shape[0] == 0:
            return True
        lo, hi = slots.aminmax()
        return int(lo) >= 0 and int(hi) < self.size

    def _host_ids_in_range(self, values: np.ndarray) -> bool:
        """One pass for both bounds: a negative id read as unsigned lies beyond any size."""
        return values.shape[0] == 0 or bool(values.view(np.uint64).max() < self.size)

    def _check_tensor(self, indices: torch.Tensor) -> None:
        if indices.dtype is not torch.int64 or indices.dim() != 1:
            raise ForeignIndexError(f"{self.name} pool: indices must be a 1-D int64 tensor")
        elsewhere = not indices.is_cpu if self.on_host else indices.device != self.device
        if elsewhere:
            raise ForeignIndexError(f"{self.name} pool: indices on {indices.device}, pool on {self.device}")

    def _refuse_range(self, indices: torch.Tensor) -> None:
        lo, hi = int(indices.min()), int(indices.max())
        raise ForeignIndexError(f"{self.name} pool: index out of range [0, {self.size}): {lo}..{hi}")

    def _already_free(self, indices: torch.Tensor) -> list[int]:
        pages = torch.div(indices, self.page_size, rounding_mode="floor")
        seen, bad = set(), []
        owned = self._owned.tolist()
        for slot, page in zip(indices.tolist(), pages.tolist()):
            if owned[page] <= 0 or page in seen:
                bad.append(slot)
            seen.add(page)
        return bad[:8]

    def free_pages_list(self) -> list[int]:
        """Free page ids (inspection only: copies to the host)."""
        return self._stack[: self._top].tolist()

    def free_pages(self) -> torch.Tensor:
        """Free page ids as a tensor on the pool's device (inspection only: a copy)."""
        return self._stack[: self._top].clone()

    def all_owned(self, indices) -> bool:
        """Every page holding ``indices`` (a tensor or a host array) is handed out
        (inspection: one gather, on the host)."""
        if len(indices) == 0:
            return True
        pages = host_ints(indices)
        if self.page_size > 1:
            pages = pages // self.page_size
        return bool(gather(self._owned, pages).min() > 0)

    def owned_mask(self) -> torch.Tensor:
        """1 for each page handed out, 0 for each free one (a copy)."""
        return (self._owned > 0).to(torch.int32)
