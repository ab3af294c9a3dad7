"""A KV buffer that stores, per slot, a fingerprint of the token prefix ending there.

Real KV for position i depends on every token up to i, so a prefix hash is the
smallest stand-in that still proves a match returned the right slots: the slots a
match hands out must hold exactly the fingerprints of the query's prefix.

The hash is polynomial modulo the Mersenne prime 2**31 - 1, computed on the device
without a Python loop: h_i = B**i * cumsum_j((t_j + 1) * B**-j) mod p. Every product
stays below 2**62, so int64 never overflows.
"""

from __future__ import annotations

import torch

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
        tokens = torch.tensor(tokens, dtype=torch.int64, device=device)
    n = tokens.shape[0]
    if n == 0:
        return tokens.new_empty(0)
    pw, ipw = _POWERS.get(n, tokens.device)
    terms = (tokens.to(torch.int64) + 1) % _P * ipw % _P
    return torch.cumsum(terms, 0) % _P * pw % _P


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
