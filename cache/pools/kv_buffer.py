"""A KV buffer that stores, per slot, a fingerprint of the token prefix ending there.

Real KV for position i depends on every token up to i, so a prefix hash is the
smallest stand-in that still proves a match returned the right slots: the slots a
match hands out must hold exactly the fingerprints of the query's prefix.

The hash is polynomial modulo the Mersenne prime 2**31 - 1, computed on the device
without a Python loop: h_i = B**i * cumsum_j((t_j + 1) * B**-j) mod p. Every product
stays below 2**62, so int64 never overflows.
"""

from __future__ import annotations

from array import array
from typing import Optional

import torch

from ..keys import TOKEN_BYTES

_P = 2**31 - 1
_B = 1_000_003
_B_INV = pow(_B, -1, _P)


class _Powers:
    """Host-computed tables of B**i and B**-i mod p, grown on demand, kept per device."""

    def __init__(self) -> None:
        self._by_device: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def get(self, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        cached = self._by_device.get(device)
        if cached is None or cached[0].shape[0] < n:
            size = max(n, 4096, 2 * (cached[0].shape[0] if cached else 0))
            pw, ipw = [1] * size, [1] * size
            for i in range(1, size):
                pw[i] = pw[i - 1] * _B % _P
                ipw[i] = ipw[i - 1] * _B_INV % _P
            cached = (torch.tensor(pw, dtype=torch.int64, device=device), torch.tensor(ipw, dtype=torch.int64, device=device))
            self._by_device[device] = cached
        return cached[0][:n], cached[1][:n]


_POWERS = _Powers()


def prefix_fingerprints(tokens: torch.Tensor | list[int], device: torch.device | None = None) -> torch.Tensor:
    """Fingerprint of every prefix of ``tokens`` (position i covers tokens[0..i])."""
    if not isinstance(tokens, torch.Tensor):
        tokens = _int_tensor(tokens, device)  # through array('q'): ~10x faster than torch.tensor(list)
    n = tokens.shape[0]
    if n == 0:
        return tokens.new_empty(0)
    pw, ipw = _POWERS.get(n, tokens.device)
    terms = (tokens.to(torch.int64) + 1) % _P * ipw % _P
    return torch.cumsum(terms, 0) % _P * pw % _P


def continue_fingerprints(keys: list[bytes], starts: list[int], device: torch.device) -> torch.Tensor:
    """For token segments (packed keys), each following a prefix whose fingerprint is
    ``starts[k]`` (0: no prefix), the fingerprint at every position, segment after
    segment: ``prefix_fingerprints(prefix + segment)[len(prefix):]`` for all at once."""
    lengths = _int_tensor([len(k) // TOKEN_BYTES for k in keys], device)
    total = int(lengths.sum())
    if total == 0:
        return lengths.new_zeros(0)
    tokens = torch.frombuffer(bytearray(b"".join(keys)), dtype=torch.int32).to(device=device, dtype=torch.int64)
    pw, ipw = _POWERS.get(total + 1, device)
    csum = torch.cat([tokens.new_zeros(1), torch.cumsum((tokens + 1) % _P * ipw[:total] % _P, 0)])
    owner = torch.repeat_interleave(torch.arange(len(keys), device=device), lengths)
    first = (lengths.cumsum(0) - lengths)[owner]  # where each position's segment starts
    pos = torch.arange(total, device=device)
    local = (csum[pos + 1] - csum[first]) % _P * pw[pos] % _P  # sum (t_i + 1) B**(pos - i) over the segment
    carried = _int_tensor(list(starts), device)[owner] * pw[pos - first + 1] % _P
    return (carried + local) % _P


def node_path_fingerprints(nodes, device: torch.device, targets=None) -> list[Optional[int]]:
    """Per node of ``targets`` (default: ``nodes``, in order), ``prefix_fingerprints(path)[-1]``
    where the path is the tokens from the top of its ``parent`` chain (whose own key is
    not counted) to the node's end; None where that path has no tokens or its parent
    links run in a cycle. ``nodes``: the nodes to hash in one batch (e.g. a whole tree).

    Each node maps its parent's fingerprint h to h * B**len + (its own segment's hash);
    composing those maps up the tree by pointer jumping takes log2(depth) vectorised
    steps, so the cost is O(nodes) in Python and O(tokens) in torch instead of one
    fingerprint per node over its whole path. Ancestors not listed are found a level
    at a time, so listing every node of the tree is fastest."""
    order = [node for node in nodes if node.parent is not None]  # one row per chain node
    row_of = dict(zip(map(id, order), range(len(order))))
    in_order = targets is None and len(order) == len(nodes)  # the answer is rows 0..n-1
    if targets is None:
        targets = nodes
    else:
        for node in targets:
            if node.parent is not None and id(node) not in row_of:
                row_of[id(node)] = len(order)
                order.append(node)
    up = [row_of.get(id(node.parent), -1) for node in order]  # -1: the chain's top (a last, extra row)
    pending = [k for k, u in enumerate(up) if u < 0 and order[k].parent.parent is not None]
    while pending:  # ancestors the caller did not list
        first_new = len(order)
        for k in pending:
            parent = order[k].parent
            if id(parent) not in row_of:
                row_of[id(parent)] = len(order)
                order.append(parent)
                up.append(row_of.get(id(parent.parent), -1))
            up[k] = row_of[id(parent)]
        pending = [k for k in range(first_new, len(order)) if up[k] < 0 and order[k].parent.parent is not None]
    up = _int_tensor(up + [-1], device)
    keys = [c.key for c in order]
    length = _int_tensor([len(k) // TOKEN_BYTES for k in keys] + [0], device)
    pw, _ = _POWERS.get(int(length.max()) + 1, device)
    mul = pw[length]  # each row's map: h -> mul * h + add (mod p)
    add = torch.cat([_segment_hashes(keys, length[:-1], device), length.new_zeros(1)])
    top = len(order)
    up = torch.where(up < 0, top, up)
    for _ in range(top.bit_length() + 1):
        if bool((up == top).all()):
            break
        add = (mul * add[up] + add) % _P
        mul = mul * mul[up] % _P
        length = length + length[up]
        up = up[up]
    valid = (up == top) & (length > 0)  # reached the top, and over some tokens
    fps = torch.where(valid, add, -1)
    if in_order:
        fps = fps[: len(nodes)].tolist()
    else:
        fps = fps[[row_of[id(node)] if node.parent is not None else top for node in targets]].tolist()
    return fps if min(fps, default=0) >= 0 else [fp if fp >= 0 else None for fp in fps]


def path_fingerprints(nodes, buffer: Optional[KVFingerprintBuffer], device: torch.device) -> list[int]:
    """Each node's path fingerprint (0 for one with no path tokens, the root): read from
    ``buffer`` at its last Full slot where it holds device slots (the per-step check
    reads only nodes whose slots it verifies the same step, or whose children's slots
    hold the whole path's KV), else hashed along its path (``node_path_fingerprints``).
    ``buffer`` None (fingerprints not kept): every one hashed."""
    out = [0] * len(nodes)
    stored = [] if buffer is None else [
        k for k, n in enumerate(nodes) if n.parent is not None and n.data[0].value is not None and n.data[0].value.shape[0]]
    if stored:
        last = torch.stack([nodes[k].data[0].value[-1] for k in stored])
        for k, fp in zip(stored, buffer.read(last).tolist()):
            out[k] = fp
    read = set(stored)
    hashed = [k for k, n in enumerate(nodes) if n.parent is not None and k not in read]
    if hashed:
        for k, fp in zip(hashed, node_path_fingerprints([nodes[k] for k in hashed], device)):
            out[k] = fp or 0
    return out


def _segment_hashes(keys: list[bytes], lengths: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Per key (a node's packed tokens, ``lengths`` tokens each), sum_k (t_k + 1) *
    B**(len - 1 - k) mod p: one cumulative sum over all keys joined, cut at the ends."""
    total = int(lengths.sum())
    if total == 0:
        return lengths.new_zeros(len(keys))
    tokens = torch.frombuffer(bytearray(b"".join(keys)), dtype=torch.int32).to(device=device, dtype=torch.int64)
    pw, ipw = _POWERS.get(total, device)
    csum = torch.cat([tokens.new_zeros(1), torch.cumsum((tokens + 1) % _P * ipw % _P, 0)])
    ends = lengths.cumsum(0)
    last = (ends - 1).clamp(min=0)  # an empty segment sums to 0 whatever power it takes
    return (csum[ends] - csum[ends - lengths]) % _P * pw[last] % _P


def _int_tensor(values, device: torch.device) -> torch.Tensor:
    """An int64 tensor from ints (a list, an array, any sequence; through an array: ~10x
    faster than torch.tensor)."""
    if not len(values):
        return torch.empty(0, dtype=torch.int64, device=device)
    return torch.frombuffer(array("q", values), dtype=torch.int64).to(device)


class KVFingerprintBuffer:
    """One fingerprint per slot of a pool; -1 where nothing was ever written."""

    def __init__(self, size: int, device: torch.device) -> None:
        self.size = size
        self.device = device
        self.data = torch.full((size,), -1, dtype=torch.int64, device=device)

    def write(self, slots: torch.Tensor, fingerprints: torch.Tensor) -> None:
        self.data[slots] = fingerprints

    def read(self, slots: torch.Tensor) -> torch.Tensor:
        return self.data[slots]

    def mismatches(self, slots: torch.Tensor, tokens: torch.Tensor | list[int]) -> list[int]:
        """Positions i where slot i does not hold the fingerprint of tokens[0..i]."""
        expected = prefix_fingerprints(tokens, self.device)[: slots.shape[0]]
        bad = (self.read(slots) != expected).nonzero().flatten()
        return bad.tolist()
