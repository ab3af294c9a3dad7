"""The host tier's pools (HiCache): KV, Mamba states and other slot data kept in CPU memory.

A host pool is the device pool's twin on the CPU — page-granular slots for KV, single
slots for states — holding the same fingerprints, so a copy back to the device is
verified like a match. Its tensors are pinned when CUDA is present (the copies are
then true asynchronous DMA in SGLang; here every copy completes when made). The pool
only stores and copies: which node is backed up, and when, is the tree's decision.
"""

from __future__ import annotations

from typing import Optional

import torch

from .allocator import PagedAllocator
from .kv_buffer import KVFingerprintBuffer
from .mamba_pool import MambaStatePool

HOST = torch.device("cpu")


def _pinned(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.pin_memory() if torch.cuda.is_available() else tensor


class HostKVPool:
    """KV slots in host memory (Full's, or SWA's): ``backup`` copies device slots in,
    ``load`` copies host slots back out to device slots the caller allocated."""

    def __init__(self, size: int, page_size: int, name: str = "full_host") -> None:
        self.allocator = PagedAllocator(size, page_size, HOST, name)
        self.buffer = KVFingerprintBuffer(size, HOST)
        self.buffer.data = _pinned(self.buffer.data)

    @property
    def size(self) -> int:
        return self.allocator.size

    @property
    def pinned(self) -> bool:
        return self.buffer.data.is_pinned()

    def available_size(self) -> int:
        return self.allocator.available_size()

    def clear(self) -> None:
        self.allocator.clear()
        self.buffer.data.fill_(-1)

    def backup(self, device: KVFingerprintBuffer, slots: torch.Tensor) -> torch.Tensor:
        """Host slots holding a copy of the device ``slots`` (refused whole, before any
        change, when the host pool is short: PoolExhaustedError)."""
        host = self.allocator.alloc(int(slots.shape[0]))
        self.copy_in(device, slots, host)
        return host

    def copy_in(self, device: KVFingerprintBuffer, slots: torch.Tensor, host: torch.Tensor) -> None:
        """Copy the device ``slots`` into host slots the caller allocated."""
        self.buffer.data[host] = device.data[slots].to(HOST)

    def load(self, device: KVFingerprintBuffer, host: torch.Tensor, slots: torch.Tensor) -> None:
        """Copy host slots back into the device ``slots``."""
        if host.shape != slots.shape:
            raise ValueError(f"load of {host.shape[0]} host slot(s) into {slots.shape[0]} device slot(s)")
        device.data[slots] = self.buffer.data[host].to(device.data.device)

    def free(self, host: torch.Tensor) -> int:
        return self.allocator.free(host, trusted=True)  # only ever slots this pool handed out

    # ---- storage pages (the storage tier writes and reads these bytes) ------------------
    def page_bytes(self, slots: torch.Tensor) -> bytes:
        """One storage page: the rows of ``slots`` (KV fingerprints), little-endian int64."""
        return self.buffer.data[slots].to(torch.int64).numpy().astype("<i8").tobytes()

    def write_page(self, slots: torch.Tensor, page: Optional[bytes]) -> bool:
        """Fill ``slots`` from a stored page; False (nothing written) for a missing or
        wrong-sized page."""
        if page is None or len(page) != int(slots.shape[0]) * 8:
            return False
        self.buffer.data[slots] = torch.frombuffer(bytearray(page), dtype=torch.int64)
        return True


class HostMambaPool(MambaStatePool):
    """Mamba states in host memory, one slot each, copied whole to and from the device pool."""

    def __init__(self, size: int, name: str) -> None:
        super().__init__(size, HOST, name)
        self.allocator.name = f"{name}_host"
        self.conv, self.ssm = _pinned(self.conv), _pinned(self.ssm)
        self.fingerprint = _pinned(self.fingerprint)

    def backup(self, device: MambaStatePool, slot: torch.Tensor) -> torch.Tensor:
        host = self.allocator.alloc(1)
        self.copy_in(device, slot, host)
        return host

    def copy_in(self, device: MambaStatePool, slot: torch.Tensor, host: torch.Tensor) -> None:
        self._copy(device, slot, self, host)

    def load(self, device: MambaStatePool, host: torch.Tensor, slot: torch.Tensor) -> None:
        self._copy(self, host, device, slot)

    # ---- storage pages: one state a page (conv, ssm, then its fingerprint) -------------
    def page_bytes(self, slot: torch.Tensor) -> bytes:
        s = int(slot.reshape(-1)[0])
        return (self.conv[s].contiguous().numpy().astype("<f4").tobytes()
                + self.ssm[s].contiguous().numpy().astype("<f4").tobytes()
                + self.fingerprint[s : s + 1].numpy().astype("<i8").tobytes())

    def write_page(self, slot: torch.Tensor, page: Optional[bytes]) -> bool:
        conv, ssm = self.conv[0].numel() * 4, self.ssm[0].numel() * 4
        if page is None or slot.numel() != 1 or len(page) != conv + ssm + 8:
            return False
        s = int(slot.reshape(-1)[0])
        self.conv[s] = torch.frombuffer(bytearray(page[:conv]), dtype=torch.float32).reshape(self.conv[s].shape)
        self.ssm[s] = torch.frombuffer(bytearray(page[conv : conv + ssm]), dtype=torch.float32).reshape(self.ssm[s].shape)
        self.fingerprint[s] = int.from_bytes(page[conv + ssm :], "little", signed=True)
        return True

    @staticmethod
    def _copy(src: MambaStatePool, src_slot: torch.Tensor, dst: MambaStatePool, dst_slot: torch.Tensor) -> None:
        target = dst.conv.device
        dst.conv[dst_slot] = src.conv[src_slot].to(target)
        dst.ssm[dst_slot] = src.ssm[src_slot].to(target)
        dst.fingerprint[dst_slot] = src.fingerprint[src_slot].to(target)


class HostSlotPool:
    """Single slots in host memory for any device slot pool (a component's entries,
    one per slot): the device pool's per-slot ``tensors`` mirrored on the CPU and
    copied whole, slot for slot, to and from it."""

    def __init__(self, device_pool, tensors: tuple[str, ...], size: int, name: str) -> None:
        self.allocator = PagedAllocator(size, 1, HOST, name)
        self.tensors = tensors
        for attr in tensors:
            like = getattr(device_pool, attr)
            setattr(self, attr, _pinned(torch.zeros((size, *like.shape[1:]), dtype=like.dtype)))

    @property
    def size(self) -> int:
        return self.allocator.size

    def available_size(self) -> int:
        return self.allocator.available_size()

    def clear(self) -> None:
        self.allocator.clear()
        for attr in self.tensors:
            getattr(self, attr).zero_()

    def copy_in(self, device, slots: torch.Tensor, host: torch.Tensor) -> None:
        for attr in self.tensors:
            getattr(self, attr)[host] = getattr(device, attr)[slots].to(HOST)

    def load(self, device, host: torch.Tensor, slots: torch.Tensor) -> None:
        for attr in self.tensors:
            target = getattr(device, attr)
            target[slots] = getattr(self, attr)[host].to(target.device)
