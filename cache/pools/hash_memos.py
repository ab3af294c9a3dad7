"""What the fingerprint hashes remember, so a checked step does not hash the same
tokens again: the last token sequence hashed whole, and the segments (node keys)
continued lately. Both answer for a pure function of their inputs and decide a hit by
comparing the inputs themselves, so an answer is always what hashing would give; the
per-step checks still read the buffer fresh and compare it with that answer."""

from __future__ import annotations

import threading
from typing import Optional

import numpy as np

from ..basics.keys import TOKEN_BYTES


class LastHashed:
    """The last tokens ``prefix_hashes`` hashed (a copy) and their hashes (read-only).
    A checked step hashes one request's tokens up to four times: the match's check,
    the KV write, the Mamba state and the insert's check of the new node. Each is a
    prefix of the request or a segment of it, so all but the first are answered here.
    The pair is one tuple, replaced whole: a workbench checks chapters in threads."""

    __slots__ = ("_pair",)

    def __init__(self) -> None:
        empty = np.zeros(0, dtype=np.int64)
        self._pair = (empty, empty)

    def prefix(self, tokens: np.ndarray) -> Optional[np.ndarray]:
        known, hashes = self._pair
        n = tokens.shape[0]
        if n > known.shape[0] or not np.array_equal(tokens, known[:n]):
            return None
        return hashes[:n]

    def segment(self, key: bytes, offset: int, start: int) -> Optional[np.ndarray]:
        """``continue_hashes([key], [start])`` when the tokens hashed last hold ``key`` at
        ``offset`` after a prefix whose fingerprint is ``start`` (0 at offset 0)."""
        known, hashes = self._pair
        n = len(key) // TOKEN_BYTES
        if offset < 0 or offset + n > known.shape[0] or start != (int(hashes[offset - 1]) if offset else 0):
            return None
        if not np.array_equal(np.frombuffer(key, dtype=np.int32), known[offset:offset + n]):
            return None
        return hashes[offset:offset + n]

    def keep(self, tokens: np.ndarray, hashes: np.ndarray) -> None:
        hashes.flags.writeable = False
        self._pair = (tokens.copy(), hashes)  # a copy: the caller's tokens may change later


class SegmentHashes:
    """``continue_hashes`` of one segment, by (packed key, start): a node's key is one
    bytes object for its life, so the probes that re-read a node (an ancestor of the
    next insert, the parent of an evicted leaf) look its hashes up instead of hashing
    again. Oldest first out once the segments kept pass ``max_tokens``."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.tokens = 0
        self._hashes: dict[tuple[bytes, int], np.ndarray] = {}
        self._lock = threading.Lock()  # keeping counts and drops: one thread at a time

    def get(self, key: bytes, start: int) -> Optional[np.ndarray]:
        if type(key) is not bytes:  # a node's key is; a caller's buffer may change later
            return None
        return self._hashes.get((key, start))  # a bytes key compares by identity first, then by value

    def keep(self, key: bytes, start: int, hashes: np.ndarray) -> None:
        n = hashes.shape[0]
        if type(key) is not bytes or not n or n > self.max_tokens or (key, start) in self._hashes:
            return  # empty segments are not kept: every entry counts towards the bound
        hashes = hashes.copy()  # not a view: a slice would keep the whole array it was cut from
        hashes.flags.writeable = False
        with self._lock:
            kept = self._hashes
            if (key, start) in kept:
                return
            while kept and self.tokens + n > self.max_tokens:
                self.tokens -= kept.pop(next(iter(kept))).shape[0]
            kept[(key, start)] = hashes
            self.tokens += n
