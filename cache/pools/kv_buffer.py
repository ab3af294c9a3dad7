"""A KV buffer that stores, per slot, a fingerprint of the token prefix ending there.

Real KV for position i depends on every token up to i, so a prefix hash is the
smallest stand-in that still proves a match returned the right slots: the slots a
match hands out must hold exactly the fingerprints of the query's prefix.

The hash is polynomial modulo the Mersenne prime 2**31 - 1 without a Python loop:
h_i = B**i * cumsum_j((t_j + 1) * B**-j) mod p. Every product stays below 2**62, so
int64 never overflows. It is computed on the host in numpy, whose calls cost a
microsecond where a small torch call costs five to ten (the per-step checks hash a
few short segments per step); only the buffer itself lives on the pool's device.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ..basics.keys import TOKEN_BYTES
from ..basics.numpy_views import gather, host_ints, host_lasts
from .hash_memos import LastHashed, SegmentHashes

_P = 2**31 - 1
_B = 1_000_003
_B_INV = pow(_B, -1, _P)


class _Powers:
    """Tables of B**i and B**-i mod p, grown on demand (doubling)."""

    def __init__(self) -> None:
        self.pw = self.ipw = np.ones(0, dtype=np.int64)

    def get(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if self.pw.shape[0] < n:
            size = max(n, 4096, 2 * self.pw.shape[0])
            pw, ipw = [1] * size, [1] * size
            for i in range(1, size):
                pw[i] = pw[i - 1] * _B % _P
                ipw[i] = ipw[i - 1] * _B_INV % _P
            self.pw, self.ipw = np.array(pw, dtype=np.int64), np.array(ipw, dtype=np.int64)
        return self.pw[:n], self.ipw[:n]


_POWERS = _Powers()


def _joined_sums(keys: list[bytes]) -> np.ndarray:
    """Over the tokens of packed keys (``keys.pack_tokens``) joined: csum[i] = sum over
    j < i of (t_j + 1) * B**-j mod p (csum[0] = 0), each term reduced first; a segment's
    hash is a difference of two entries times a power of B."""
    joined = b"".join(keys)
    total = len(joined) // TOKEN_BYTES
    csum = np.zeros(total + 1, dtype=np.int64)
    if total:
        tokens = np.frombuffer(joined, dtype=np.int32).astype(np.int64)
        np.cumsum((tokens + 1) * _POWERS.get(total)[1] % _P, out=csum[1:])  # int32 tokens: under 2**62
    return csum


_LAST = LastHashed()
_SEGMENTS = SegmentHashes(max_tokens=1 << 20)  # 8 MiB of hashes at most


def prefix_hashes(tokens) -> np.ndarray:
    """Fingerprint of every prefix of ``tokens`` (position i covers tokens[0..i]), on the
    host; read-only (it may be the remembered one, ``hash_memos.LastHashed``)."""
    narrow = isinstance(tokens, np.ndarray) and tokens.dtype == np.int32  # a packed key's tokens
    tokens = host_ints(tokens)
    n = tokens.shape[0]
    if n == 0:
        return tokens
    known = _LAST.prefix(tokens)
    if known is not None:
        return known
    hashes = _run_hashes(tokens, 0, narrow)
    _LAST.keep(tokens, hashes)
    return hashes


def _run_hashes(tokens: np.ndarray, start: int, narrow: bool) -> np.ndarray:
    """The fingerprint at every position of int64 ``tokens`` following a prefix whose
    fingerprint is ``start`` (reduced; 0: no prefix). ``narrow``: the ids fit int32 (a
    packed key's), so |t + 1| <= 2**31 and each product stays under 2**62 unreduced, the
    two summed at the end under 2**63; wider ids are reduced first."""
    n = tokens.shape[0]
    pw, ipw = _POWERS.get(n + 1)
    terms = (tokens + 1) * ipw[:n] if narrow else (tokens + 1) % _P * ipw[:n]
    out = np.cumsum(terms % _P) % _P * pw[:n]
    if start:
        out += start * pw[1:]
    return out % _P


def prefix_fingerprints(tokens, device: torch.device | None = None) -> torch.Tensor:
    """``prefix_hashes`` as a tensor on ``device`` (what the buffer is written with)."""
    if device is None and isinstance(tokens, torch.Tensor):
        device = tokens.device
    out = torch.from_numpy(prefix_hashes(tokens).copy())  # a tensor of its own: the hashes are read-only
    return out if device is None else out.to(device)


def continue_hashes(keys: list[bytes], starts: list[int], offsets: Optional[list[int]] = None) -> np.ndarray:
    """For token segments (packed keys), each following a prefix whose fingerprint is
    ``starts[k]`` (0: no prefix), the fingerprint at every position, segment after
    segment: ``prefix_hashes(prefix + segment)[len(prefix):]`` for all at once.
    ``offsets``: each prefix's length in tokens, where known, so the last tokens hashed
    (the step's request) can answer segments of themselves. The answer may be a
    remembered array: read it, never write into it."""
    starts = [int(start) % _P for start in starts]  # a start read from a corrupt buffer may be anything
    known = [_SEGMENTS.get(key, start) for key, start in zip(keys, starts)]
    if offsets is not None:
        for k, hashes in enumerate(known):
            if hashes is None:
                known[k] = _LAST.segment(keys[k], offsets[k], starts[k])
    unknown = [k for k, hashes in enumerate(known) if hashes is None]
    if unknown:  # hashed together, then cut back into their places
        fresh = _hash_segments([keys[k] for k in unknown], [starts[k] for k in unknown])
        ends = np.cumsum([len(keys[k]) // TOKEN_BYTES for k in unknown]).tolist()
        for k, lo, hi in zip(unknown, [0] + ends, ends):
            known[k] = fresh[lo:hi]
    for key, start, hashes in zip(keys, starts, known):
        _SEGMENTS.keep(key, start, hashes)
    if len(known) == 1:
        return known[0]
    return np.concatenate(known) if known else np.zeros(0, dtype=np.int64)


def _hash_segments(keys: list[bytes], starts: list[int]) -> np.ndarray:
    """``continue_hashes`` computed, for reduced starts."""
    if len(keys) == 1:  # the probe's usual case: no cuts between segments
        return _run_hashes(np.frombuffer(keys[0], dtype=np.int32).astype(np.int64), starts[0], True)
    lengths = np.fromiter((len(k) // TOKEN_BYTES for k in keys), dtype=np.int64, count=len(keys))
    csum = _joined_sums(keys)
    total = csum.shape[0] - 1
    if total == 0:
        return csum[1:]
    pw, _ = _POWERS.get(total + 1)
    first = np.repeat(np.cumsum(lengths) - lengths, lengths)  # where each position's segment starts
    pos = np.arange(total)
    local = (csum[1:] - csum[first]) % _P * pw[:total] % _P  # sum (t_i + 1) B**(pos - i) over the segment
    carried = np.repeat(np.asarray(starts, dtype=np.int64), lengths) * pw[pos - first + 1] % _P
    return (carried + local) % _P


def continue_fingerprints(keys: list[bytes], starts: list[int], device: torch.device) -> torch.Tensor:
    """``continue_hashes`` as a tensor on ``device``."""
    return torch.from_numpy(continue_hashes(keys, starts).copy()).to(device)  # its own: the hashes are read-only


def node_path_fingerprints(nodes, targets=None) -> list[Optional[int]]:
    """Per node of ``targets`` (default: ``nodes``, in order), ``prefix_hashes(path)[-1]``
    where the path is the tokens from the top of its ``parent`` chain (whose own key is
    not counted) to the node's end; None where that path has no tokens or its parent
    links run in a cycle. ``nodes``: the nodes to hash in one batch (e.g. a whole tree).

    Each node maps its parent's fingerprint h to h * B**len + (its own segment's hash);
    composing those maps up the tree by pointer jumping takes log2(depth) vectorised
    steps, so the cost is O(nodes) in Python and O(tokens) in numpy instead of one
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
    top = len(order)
    up = np.array(up + [top], dtype=np.int64)
    up[up < 0] = top
    keys = [c.key for c in order]
    length = np.array([len(k) // TOKEN_BYTES for k in keys] + [0], dtype=np.int64)
    pw, _ = _POWERS.get(int(length.max()) + 1)
    mul = pw[length]  # each row's map: h -> mul * h + add (mod p)
    add = np.append(_segment_hashes(keys, length[:-1]), 0)
    for _ in range(top.bit_length() + 1):
        if (up == top).all():
            break
        add = (mul * add[up] + add) % _P
        mul = mul * mul[up] % _P
        length = length + length[up]
        up = up[up]
    fps = np.where((up == top) & (length > 0), add, -1)  # reached the top, and over some tokens
    if in_order:
        fps = fps[: len(nodes)].tolist()
    else:
        fps = fps[[row_of[id(node)] if node.parent is not None else top for node in targets]].tolist()
    return fps if min(fps, default=0) >= 0 else [fp if fp >= 0 else None for fp in fps]


def path_fingerprints(nodes, buffer: Optional[KVFingerprintBuffer]) -> list[int]:
    """Each node's path fingerprint (0 for one with no path tokens, the root): read from
    ``buffer`` at its last Full slot where it holds device slots (the per-step check
    reads only nodes whose slots it verifies the same step, or whose children's slots
    hold the whole path's KV), else hashed along its path (``node_path_fingerprints``).
    ``buffer`` None (fingerprints not kept): every one hashed."""
    out = [0] * len(nodes)
    stored = [] if buffer is None else [
        k for k, n in enumerate(nodes) if n.parent is not None and n.data[0].value is not None and n.data[0].value.shape[0]]
    if stored:
        last = host_lasts([nodes[k].data[0].value for k in stored])
        for k, fp in zip(stored, buffer.read_host(last).tolist()):
            out[k] = fp
    read = set(stored)
    hashed = [k for k, n in enumerate(nodes) if n.parent is not None and k not in read]
    if hashed:
        for k, fp in zip(hashed, node_path_fingerprints([nodes[k] for k in hashed])):
            out[k] = fp or 0
    return out


def _segment_hashes(keys: list[bytes], lengths: np.ndarray) -> np.ndarray:
    """Per key (a node's packed tokens, ``lengths`` tokens each), sum_k (t_k + 1) *
    B**(len - 1 - k) mod p: one cumulative sum over all keys joined, cut at the ends."""
    csum = _joined_sums(keys)
    total = csum.shape[0] - 1
    if total == 0:
        return np.zeros(len(keys), dtype=np.int64)
    pw, _ = _POWERS.get(total)
    ends = np.cumsum(lengths)
    last = np.maximum(ends - 1, 0)  # an empty segment sums to 0 whatever power it takes
    return (csum[ends] - csum[ends - lengths]) % _P * pw[last] % _P


class KVFingerprintBuffer:
    """One fingerprint per slot of a pool; -1 where nothing was ever written."""

    def __init__(self, size: int, device: torch.device) -> None:
        self.size = size
        self.device = device
        self.data = torch.full((size,), -1, dtype=torch.int64, device=device)

    def write(self, slots, fingerprints) -> None:
        """Store ``fingerprints`` (a tensor or a host array) at ``slots``; on the CPU
        through numpy views (one small torch scatter costs several numpy ones)."""
        if self.data.device.type == "cpu":
            self.data.numpy()[host_ints(slots)] = host_ints(fingerprints)
        else:
            self.data[torch.as_tensor(slots, device=self.device)] = torch.as_tensor(fingerprints, device=self.device)

    def read(self, slots: torch.Tensor) -> torch.Tensor:
        return self.data[slots]

    def read_host(self, slots) -> np.ndarray:
        """The fingerprints at ``slots`` (a tensor, an array, a list) as a host array: the
        checks compare them with ``prefix_hashes`` there (one copy from a GPU)."""
        return gather(self.data, host_ints(slots))

    def holds(self, slots, expected: np.ndarray) -> bool:
        """Whether ``slots`` hold exactly ``expected`` (host fingerprints)."""
        return bool(np.array_equal(self.read_host(slots), expected))

    def mismatches(self, slots: torch.Tensor, tokens) -> list[int]:
        """Positions i where slot i does not hold the fingerprint of tokens[0..i] (the
        slots may cover a prefix of ``tokens``: all of them are hashed, as the insert of
        the same request will ask for them next)."""
        if not slots.shape[0]:
            return []
        expected = prefix_hashes(tokens)[: slots.shape[0]]
        return np.flatnonzero(self.read_host(slots) != expected).tolist()
