"""Reading pool tensors on the host, for the per-step checks.

A check reads a handful of slots per step, where a torch call costs five to ten
microseconds whatever its size and a numpy call about one. On the CPU a pool tensor
and its numpy view share memory, so the checks index the view; on an accelerator
they gather there and copy the few values once. The pools' own I/O stays in torch.
"""

from __future__ import annotations

from array import array

import numpy as np
import torch


def host_ints(values) -> np.ndarray:
    """int64 numpy view or copy of token ids or slots: a list, an array, a tensor, a numpy array."""
    if isinstance(values, np.ndarray):
        return values.astype(np.int64, copy=False)
    if isinstance(values, torch.Tensor):
        return host_array(values).astype(np.int64, copy=False)
    if isinstance(values, array) and values.itemsize == 8:
        return np.frombuffer(values, dtype=np.int64) if len(values) else np.zeros(0, dtype=np.int64)
    if not len(values):
        return np.zeros(0, dtype=np.int64)
    return np.frombuffer(array("q", values), dtype=np.int64)  # ~10x faster than np.array(list)


def host_array(tensor: torch.Tensor) -> np.ndarray:
    """The tensor on the host: a view of the same memory on the CPU, else one copy."""
    if tensor.requires_grad:  # never, for a pool or a slot tensor: detach only then (it costs a new tensor)
        tensor = tensor.detach()
    return tensor.numpy() if tensor.device.type == "cpu" else tensor.cpu().numpy()


def host_cat(tensors: list[torch.Tensor]) -> np.ndarray:
    """Tensors joined, on the host (on an accelerator: one cat there, one copy)."""
    if not tensors:
        return np.zeros(0, dtype=np.int64)
    if tensors[0].device.type != "cpu":
        return torch.cat(tensors).cpu().numpy()
    return tensors[0].numpy() if len(tensors) == 1 else np.concatenate([t.numpy() for t in tensors])


def gather(tensor: torch.Tensor, index: np.ndarray) -> np.ndarray:
    """``tensor[index]`` on the host (rows, for a tensor of several dimensions)."""
    if tensor.device.type == "cpu":
        return tensor.numpy()[index]
    return tensor[torch.as_tensor(index, device=tensor.device)].cpu().numpy()
