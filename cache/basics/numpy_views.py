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


def host_tails(tensors: list[torch.Tensor], starts: list[int]) -> np.ndarray:
    """Each tensor from its start on, joined on the host: the slots running requests
    own past the tree's prefix, read every step (a numpy slice costs a tenth of a
    tensor's)."""
    if not tensors:
        return np.zeros(0, dtype=np.int64)
    if tensors[0].device.type != "cpu":
        return host_cat([t[start:] for t, start in zip(tensors, starts)])
    if len(tensors) == 1:
        return tensors[0].numpy()[starts[0]:]
    return np.concatenate([t.numpy()[start:] for t, start in zip(tensors, starts)])


def host_lasts(tensors: list[torch.Tensor]) -> np.ndarray:
    """The last entry of each (non-empty) tensor, on the host: a node's last slot, where
    its path's fingerprint is kept."""
    if tensors and tensors[0].device.type != "cpu":
        return torch.stack([t[-1] for t in tensors]).cpu().numpy()
    return np.array([t.numpy()[-1] for t in tensors], dtype=np.int64)


def distinct(values: np.ndarray) -> int:
    """How many different values: a set for the few a step reads (np.unique costs 4 µs
    on 30 values, a set under 1), np.unique for many."""
    return len(set(values.tolist())) if len(values) < 512 else len(np.unique(values))


def gather(tensor: torch.Tensor, index: np.ndarray) -> np.ndarray:
    """``tensor[index]`` on the host (rows, for a tensor of several dimensions)."""
    if tensor.device.type == "cpu":
        return tensor.numpy()[index]
    return tensor[torch.as_tensor(index, device=tensor.device)].cpu().numpy()
