"""What a storage backend does, and the simplest one.

The storage tier (SGLang's HiCache L3) keeps pages by their content hash (page_hash.py):
a key names a page and the whole prefix before it, so a ``set`` of a key that is already
stored changes nothing but its recency, and any node with the same prefix can be served
from it. The tree never learns what storage holds; a prefetch asks ``exists_prefix``.
A Mooncake or 3FS adapter would implement this protocol; the file backend (file.py) is
the embedded default and ``MemoryBackend`` serves tests.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Optional, Protocol


class StorageBackend(Protocol):
    """Pages by key. Every call answers per key and never raises for a missing page."""

    name: str

    def exists_prefix(self, keys: Sequence[str]) -> int:
        """How many of ``keys``, from the first, are stored (SGLang's ``batch_exists``)."""

    def get(self, keys: Sequence[str]) -> list[Optional[bytes]]:
        """Each key's page, or None where it is missing (a read hit refreshes recency)."""

    def set(self, keys: Sequence[str], pages: Sequence[bytes]) -> list[bool]:
        """Store each page under its key; False where it was not stored."""

    def stored_keys(self) -> list[str]:
        """Every stored key, sorted (what a view or the bridge compares)."""

    def clear(self) -> None:
        """Forget every page."""


class MemoryBackend:
    """Pages in a dict, least recently used first; no budget. For tests and scenarios
    that do not care where pages live."""

    name = "memory"

    def __init__(self) -> None:
        self._pages: OrderedDict[str, bytes] = OrderedDict()

    def exists_prefix(self, keys: Sequence[str]) -> int:
        for count, key in enumerate(keys):
            if key not in self._pages:
                return count
        return len(keys)

    def get(self, keys: Sequence[str]) -> list[Optional[bytes]]:
        out = []
        for key in keys:
            page = self._pages.get(key)
            if page is not None:
                self._pages.move_to_end(key)
            out.append(page)
        return out

    def set(self, keys: Sequence[str], pages: Sequence[bytes]) -> list[bool]:
        if len(keys) != len(pages):
            raise ValueError(f"{len(keys)} keys for {len(pages)} pages")
        for key, page in zip(keys, pages):
            if key in self._pages:  # content-addressed: the same key is the same page
                self._pages.move_to_end(key)
            else:
                self._pages[key] = bytes(page)
        return [True] * len(keys)

    def stored_keys(self) -> list[str]:
        return sorted(self._pages)

    def clear(self) -> None:
        self._pages.clear()
