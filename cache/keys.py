"""Token keys stored as packed bytes.

Matching is the hottest path in the cache. Keeping a key as the int32 bytes of its
tokens lets a node compare a whole edge with one ``bytes.startswith`` (C speed) and find
a split point with a binary search over ``startswith`` calls, instead of a Python loop
over tokens.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable

from .errors import InvalidKeyError

TOKEN_BYTES = 4  # int32 per token
MAX_TOKEN_ID = 2**31 - 1


def pack_tokens(token_ids: Iterable[int]) -> bytes:
    """Validate token ids (non-negative ints below 2**31) and pack them to bytes."""
    if isinstance(token_ids, (bytes, bytearray, str)):
        raise InvalidKeyError("token ids must be a sequence of ints, not a string or bytes")
    try:
        packed = array("i", token_ids)
    except (TypeError, OverflowError) as exc:
        bad = _first_bad_token(token_ids)
        raise InvalidKeyError(f"token ids must be non-negative ints below 2**31 (got {bad!r})") from exc
    if packed and min(packed) < 0:
        raise InvalidKeyError(f"token ids must be non-negative (got {min(packed)})")
    return packed.tobytes()


def _first_bad_token(token_ids) -> object:
    for tok in token_ids:
        if isinstance(tok, bool) or not isinstance(tok, int) or not 0 <= tok <= MAX_TOKEN_ID:
            return tok
    return None


def unpack_tokens(data: bytes) -> list[int]:
    return array("i", data).tolist()


def common_prefix_tokens(a: bytes, a_off: int, b: bytes) -> int:
    """Number of whole tokens shared by ``a[a_off:]`` and ``b`` (byte offsets)."""
    lo, hi = 0, min(len(a) - a_off, len(b)) // TOKEN_BYTES
    if a.startswith(b[: hi * TOKEN_BYTES], a_off):
        return hi
    # invariant: the first lo tokens match, the first hi do not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a.startswith(b[: mid * TOKEN_BYTES], a_off):
            lo = mid
        else:
            hi = mid
    return lo


class RadixKey:
    """A token sequence with an optional ``extra_key`` namespace (e.g. a LoRA id).

    Keys in different namespaces never share a node: the namespace is part of every
    child key.
    """

    __slots__ = ("data", "extra_key")

    def __init__(self, token_ids: Iterable[int] = (), extra_key: str | None = None):
        self.data = pack_tokens(token_ids)
        if extra_key is not None and not isinstance(extra_key, str):
            raise InvalidKeyError(f"extra_key must be a string or None (got {extra_key!r})")
        self.extra_key = extra_key

    @classmethod
    def from_bytes(cls, data: bytes, extra_key: str | None = None) -> RadixKey:
        key = cls.__new__(cls)
        key.data = data
        key.extra_key = extra_key
        return key

    @property
    def token_ids(self) -> list[int]:
        return unpack_tokens(self.data)

    def __len__(self) -> int:
        return len(self.data) // TOKEN_BYTES

    def page_aligned(self, page_size: int) -> RadixKey:
        """Drop a trailing partial page: it can never match nor be cached."""
        n = len(self.data) // TOKEN_BYTES
        aligned = n - n % page_size
        if aligned == n:
            return self
        return RadixKey.from_bytes(self.data[: aligned * TOKEN_BYTES], self.extra_key)

    def __getitem__(self, item: slice) -> RadixKey:
        if not isinstance(item, slice) or item.step not in (None, 1):
            raise TypeError("RadixKey supports contiguous slices only")
        start, stop, _ = item.indices(len(self))
        return RadixKey.from_bytes(self.data[start * TOKEN_BYTES : stop * TOKEN_BYTES], self.extra_key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RadixKey) and self.data == other.data and self.extra_key == other.extra_key

    def __hash__(self) -> int:
        return hash((self.data, self.extra_key))

    def __repr__(self) -> str:
        toks = self.token_ids
        shown = toks if len(toks) <= 8 else toks[:6] + ["…", toks[-1]]
        ns = f", extra_key={self.extra_key!r}" if self.extra_key is not None else ""
        return f"RadixKey({shown}{ns})"


def child_key(data: bytes, offset: int, page_bytes: int, extra_key: str | None):
    """The dict key a node's children are stored under: its first page (+ namespace)."""
    page = data[offset : offset + page_bytes]
    return page if extra_key is None else (extra_key, page)


def as_key(key) -> RadixKey:
    """A RadixKey from what a public call was given (a key or plain token ids),
    refusing a missing one with InvalidKeyError rather than a TypeError deep inside."""
    if isinstance(key, RadixKey):
        return key
    if key is None:
        raise InvalidKeyError("a key is required")
    return RadixKey(key)
