"""A stored node's key and path as sequences of token ids that unpack only what is read.

A state's node views hold each key and path; as tuples of ints they cost ~9 bytes a
token over the packed 4, for every node listed, and a store whose nodes share one huge
key would be unpacked once per node. ``PackedTokens`` reads as the tuple did (length,
indexing, slicing, iteration, order, and equality and hashing with tuples), and a view
that shows a head and a tail unpacks only those."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Union

from cache.basics.keys import TOKEN_BYTES, unpack_tokens


@functools.total_ordering
class PackedTokens(Sequence):
    """Token ids packed as the tree packs them (``cache/basics/keys.py``); ``data`` may be a
    function giving the bytes (a path: its ancestors' keys joined), called when first read."""

    __slots__ = ("_data",)

    def __init__(self, data: Union[bytes, Callable[[], bytes]]) -> None:
        self._data = data

    @property
    def data(self) -> bytes:
        if callable(self._data):
            self._data = self._data()
        return self._data

    def __len__(self) -> int:
        return len(self.data) // TOKEN_BYTES

    def __getitem__(self, index):
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return tuple(self[i] for i in range(start, stop, step))
            return tuple(unpack_tokens(self.data[start * TOKEN_BYTES:max(start, stop) * TOKEN_BYTES]))
        n = len(self)
        at = index + n if index < 0 else index
        if not 0 <= at < n:
            raise IndexError("token index out of range")
        return unpack_tokens(self.data[at * TOKEN_BYTES:(at + 1) * TOKEN_BYTES])[0]

    def __iter__(self):
        return iter(unpack_tokens(self.data))

    def _tuple(self, other) -> tuple | None:
        return other if isinstance(other, tuple) else tuple(other) if isinstance(other, PackedTokens) else None

    def __eq__(self, other) -> bool:
        if isinstance(other, PackedTokens):
            return self.data == other.data
        return len(other) == len(self) and tuple(self) == other if isinstance(other, tuple) else NotImplemented

    def __lt__(self, other) -> bool:
        theirs = self._tuple(other)
        return NotImplemented if theirs is None else tuple(self) < theirs

    def __hash__(self) -> int:
        return hash(tuple(self))  # as the tuple it stands for: either finds the other in a set

    def __add__(self, other):
        return tuple(self) + other if isinstance(other, tuple) else NotImplemented

    def __radd__(self, other):
        return other + tuple(self) if isinstance(other, tuple) else NotImplemented

    def __reduce__(self):
        return PackedTokens, (self.data,)

    def __repr__(self) -> str:
        return f"PackedTokens({tuple(self)!r})" if len(self) <= 16 else f"PackedTokens(<{len(self):,} tokens>)"
