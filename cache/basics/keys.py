"""Token keys stored as packed bytes.

Matching is the hottest path in the cache. Keeping a key as the int32 bytes of its
tokens lets a node compare a whole edge with one ``bytes.startswith`` (C speed) and find
a split point with a binary search over ``startswith`` calls, instead of a Python loop
over tokens.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable
from typing import NamedTuple, Optional

import numpy as np

from .errors import InvalidKeyError
from .token_lists import MAX_TOKEN_ID, TOKEN_BYTES, bad_tokens, pack_token_list, top_bits_clear

_INT_CODES = frozenset("bBhHiIlLqQ")
_WIDE_CODES = frozenset("qQlL") if array("l").itemsize == 8 else frozenset("qQ")  # 64-bit ids
_largest = np.maximum.reduce


def ceil_align(n: int, page_size: int) -> int:
    """``n`` rounded up to whole pages (a paged free or allocation takes the page ``n`` ends in)."""
    return -(-n // page_size) * page_size


def pack_tokens(token_ids: Iterable[int]) -> bytes:
    """Validate token ids (non-negative ints below 2**31) and pack them to bytes.

    A list or tuple packs in one C pass (token_lists.py). Arrays, tensors and numpy
    arrays are converted without a per-token Python step."""
    kind = type(token_ids)
    if kind is array and token_ids.typecode in _WIDE_CODES:  # 'q': what SGLang's scheduler holds
        return _narrow_wide(token_ids, token_ids.tolist)
    if kind is list or kind is tuple:
        return pack_token_list(token_ids)
    if isinstance(token_ids, (bytes, bytearray, str)):
        raise InvalidKeyError("token ids must be a sequence of ints, not a string or bytes")
    if isinstance(token_ids, array):
        if token_ids.typecode not in _INT_CODES:
            raise InvalidKeyError(f"token ids must be ints (got an array of type {token_ids.typecode!r})")
        if token_ids.typecode not in "iI" or token_ids.itemsize != TOKEN_BYTES:
            return pack_tokens(token_ids.tolist())  # another width: the list path checks it
        data = token_ids.tobytes()
        if not top_bits_clear(data):  # as 'i', a negative id has its high bit set too
            raise bad_tokens(token_ids.tolist())
        return data
    if hasattr(token_ids, "dtype") and hasattr(token_ids, "tolist"):  # a torch tensor or numpy array
        return _pack_tensor(token_ids)
    return pack_tokens(list(token_ids))  # a range, a generator, any other iterable


def _casts_check_values() -> bool:
    """Whether this numpy refuses a cast that would change a value (``casting="same_value"``, numpy 2.4+)."""
    try:
        np.zeros(1, np.uint64).astype(np.int32, casting="same_value")
    except (TypeError, ValueError):
        return False
    return True


_CHECKED_CAST = _casts_check_values()


def _narrow_wide(values, as_list) -> bytes:
    """64-bit ids to 32 at C speed, on the caller's buffer: every id, read unsigned (a
    negative one reads above 2**63), must be at most ``MAX_TOKEN_ID``. With numpy 2.4+
    one cast to int32 that refuses to change a value both checks and narrows (~2 µs for
    1,000 tokens); before it, a max and then the cast (~4 µs). ``tolist`` and the list
    path cost ~25 (docs/explanation/measurements.md, "Keys from `array('q')`")."""
    wide = np.frombuffer(values, np.uint64)
    if _CHECKED_CAST:
        try:
            return wide.astype(np.int32, casting="same_value").tobytes()
        except ValueError:
            raise bad_tokens(as_list()) from None
    if wide.size and _largest(wide) > MAX_TOKEN_ID:
        raise bad_tokens(as_list())
    return wide.astype(np.uint32).tobytes()


def _pack_tensor(values) -> bytes:
    """A 1-D integer torch tensor or numpy array, checked and narrowed in bulk."""
    dtype = str(values.dtype)
    if "int" not in dtype or getattr(values, "ndim", 1) != 1:
        raise InvalidKeyError(f"token ids must be a 1-D integer tensor or array (got {dtype}, "
                              f"{getattr(values, 'ndim', '?')}-D)")
    if hasattr(values, "detach"):  # torch
        values = values.detach().cpu().numpy()
    if values.dtype.itemsize == 2 * TOKEN_BYTES and values.flags.c_contiguous:  # int64, uint64: narrowed as arrays are
        return _narrow_wide(values, values.tolist)
    if len(values) and (int(values.min()) < 0 or int(values.max()) > MAX_TOKEN_ID):
        raise bad_tokens(values.tolist())
    return values.astype("=u4", copy=False).tobytes()


def unpack_tokens(data: bytes) -> list[int]:
    return array("i", data).tolist()


def token_array(data: bytes) -> np.ndarray:
    """Packed tokens as a read-only int32 numpy view of the same bytes (no copy): what
    the fingerprint checks hash, without a list in between."""
    return np.frombuffer(data, dtype=np.int32)


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


class Namespace(NamedTuple):
    """A key's namespace when it is more than an ``extra_key``: a ``cache_salt``, or
    the first raw token of an EAGLE bigram key (see ``RadixKey.bigram_view``)."""

    extra_key: Optional[str]
    cache_salt: Optional[str]
    bigram_head: Optional[int]


def make_namespace(extra_key: Optional[str], cache_salt: Optional[str] = None, bigram_head: Optional[int] = None):
    """What a node's children are filed under beside their first page: a plain
    ``extra_key`` (or None) as before, a ``Namespace`` once a salt or a bigram head is set."""
    if cache_salt is None and bigram_head is None:
        return extra_key
    return Namespace(extra_key, cache_salt, bigram_head)


def namespace_parts(namespace) -> Namespace:
    """(extra_key, cache_salt, bigram_head) of a node's namespace, whichever form it has."""
    return namespace if isinstance(namespace, Namespace) else Namespace(namespace, None, None)


def namespace_order(namespace) -> tuple:
    """A sort key over namespaces of every form (None first)."""
    ek, salt, head = namespace_parts(namespace)
    return (ek or "", salt or "", -1 if head is None else head)


class RadixKey:
    """A token sequence with an optional ``extra_key`` namespace (e.g. a LoRA id) and
    an optional ``cache_salt`` (a second namespace: "" means none, as v0.5.23's).

    Keys in different namespaces never share a node: the namespace is part of every
    child key. A bigram view (``bigram_view``, EAGLE) of raw tokens t0..tN holds N
    units: its data is t1..tN and t0 (``bigram_head``) joins the namespace, so a
    prefix of k bigrams is the same head and the same k data tokens; the tree needs
    no other change.
    """

    __slots__ = ("data", "extra_key", "cache_salt", "bigram_head", "is_bigram")

    def __init__(self, token_ids: Iterable[int] = (), extra_key: str | None = None, cache_salt: str | None = None):
        self.data = pack_tokens(token_ids)
        if extra_key is not None and not isinstance(extra_key, str):
            raise InvalidKeyError(f"extra_key must be a string or None (got {extra_key!r})")
        if cache_salt is not None and not isinstance(cache_salt, str):
            raise InvalidKeyError(f"cache_salt must be a string or None (got {cache_salt!r})")
        self.extra_key = extra_key
        self.cache_salt = cache_salt or None
        self.bigram_head = None
        self.is_bigram = False

    @classmethod
    def from_bytes(cls, data: bytes, extra_key: str | None = None, cache_salt: str | None = None) -> RadixKey:
        key = cls.__new__(cls)
        key.data = data
        key.extra_key = extra_key
        key.cache_salt = cache_salt or None
        key.bigram_head = None
        key.is_bigram = False
        return key

    def _like(self, data: bytes, bigram_head: Optional[int]) -> RadixKey:
        key = RadixKey.from_bytes(data, self.extra_key, self.cache_salt)
        key.is_bigram, key.bigram_head = self.is_bigram, bigram_head
        return key

    def bigram_view(self) -> RadixKey:
        """EAGLE's bigram key over these raw tokens: one unit fewer (none for one
        token), each unit a pair of neighbours. A bigram key is returned as it is."""
        if self.is_bigram:
            return self
        head = None
        if self.data:
            head = int.from_bytes(self.data[:TOKEN_BYTES], sys.byteorder)
        key = self._like(self.data[TOKEN_BYTES:], head)
        key.is_bigram = True
        return key

    @property
    def namespace(self):
        """What this key's nodes are filed under beside their first page."""
        if self.cache_salt is None and self.bigram_head is None:
            return self.extra_key
        return Namespace(self.extra_key, self.cache_salt, self.bigram_head)

    @property
    def token_ids(self) -> list[int]:
        """The key's units as stored (a bigram key: raw tokens after the first)."""
        return unpack_tokens(self.data)

    @property
    def raw_token_ids(self) -> list[int]:
        """The tokens the key spans (a bigram key: one more than its length)."""
        toks = unpack_tokens(self.data)
        return toks if self.bigram_head is None else [self.bigram_head, *toks]

    def __len__(self) -> int:
        return len(self.data) // TOKEN_BYTES

    def page_aligned(self, page_size: int) -> RadixKey:
        """Drop a trailing partial page: it can never match nor be cached."""
        n = len(self.data) // TOKEN_BYTES
        aligned = n - n % page_size
        if aligned == n:
            return self
        return self._like(self.data[: aligned * TOKEN_BYTES], self.bigram_head)

    def __getitem__(self, item: slice) -> RadixKey:
        if not isinstance(item, slice) or item.step not in (None, 1):
            raise TypeError("RadixKey supports contiguous slices only")
        start, stop, _ = item.indices(len(self))
        head = self.bigram_head
        if self.is_bigram and start > 0:  # the pair [start] begins with the raw token before it
            head = int.from_bytes(self.data[(start - 1) * TOKEN_BYTES : start * TOKEN_BYTES], sys.byteorder)
        return self._like(self.data[start * TOKEN_BYTES : stop * TOKEN_BYTES], head)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, RadixKey) and self.data == other.data and self.extra_key == other.extra_key
                and self.cache_salt == other.cache_salt and self.bigram_head == other.bigram_head
                and self.is_bigram == other.is_bigram)

    def __hash__(self) -> int:
        return hash((self.data, self.extra_key, self.cache_salt, self.bigram_head))

    def __repr__(self) -> str:
        toks = self.raw_token_ids
        shown = toks if len(toks) <= 8 else toks[:6] + ["…", toks[-1]]
        ns = f", extra_key={self.extra_key!r}" if self.extra_key is not None else ""
        ns += f", cache_salt={self.cache_salt!r}" if self.cache_salt is not None else ""
        ns += ", bigram" if self.is_bigram else ""
        return f"RadixKey({shown}{ns})"


def child_key(data: bytes, offset: int, page_bytes: int, namespace):
    """The dict key a node's children are stored under: its first page (+ namespace)."""
    page = data[offset : offset + page_bytes]
    return page if namespace is None else (namespace, page)


def as_key(key) -> RadixKey:
    """A RadixKey from what a public call was given (a key or plain token ids),
    refusing a missing one with InvalidKeyError rather than a TypeError deep inside."""
    if isinstance(key, RadixKey):
        return key
    if key is None:
        raise InvalidKeyError("a key is required")
    return RadixKey(key)
