"""What a storage backend does, and the simplest one.

The storage tier (SGLang's HiCache L3) keeps pages by their content hash (page_hash.py):
a key names a page and the whole prefix before it, so a ``set`` of a key that is already
stored changes nothing but its recency, and any node with the same prefix can be served
from it. The tree never learns what storage holds; a prefetch asks ``exists_prefix``.
A Mooncake or 3FS adapter would implement this protocol; the file backend (file.py) is
the embedded default and ``MemoryBackend`` serves tests; both take an optional byte
budget with SGLang's LRU watermark eviction (budget.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional, Protocol

from .budget import DEFAULT_EVICTION_RATIO, LruBudget

BATCH_PAGES = 128  # v0.5.23's STORAGE_BATCH_SIZE: stores and reads go this many pages a call


class StorageBackend(Protocol):
    """Pages by key. Every call answers per key and never raises for a missing page."""

    name: str

    def exists_prefix(self, keys: Sequence[str]) -> int:
        """How many of ``keys``, from the first, are stored (SGLang's ``batch_exists``)."""

    def exists_each(self, keys: Sequence[str]) -> list[bool]:
        """Whether each key is stored (a trailing-window pool's query: SWA, Mamba)."""

    def get(self, keys: Sequence[str]) -> list[Optional[bytes]]:
        """Each key's page, or None where it is missing (a read hit refreshes recency)."""

    def set(self, keys: Sequence[str], pages: Sequence[bytes]) -> list[bool]:
        """Store each page under its key; False where it was not stored (refused by the
        budget, a failed write). Each key is tried: a False does not stop the batch (the
        caller decides, as SGLang's backup stops at the first failed batch)."""

    def stored_keys(self) -> list[str]:
        """Every stored key, sorted (what a view or the bridge compares)."""

    def clear(self) -> None:
        """Forget every page."""

    def stats(self) -> dict:
        """Counters for views and metrics: pages, bytes, budget, evicted, refused."""


class MemoryBackend:
    """Pages in a dict, with the same optional byte budget and LRU eviction as the file
    backend (budget.py), so budget semantics can be pinned without touching a disk."""

    name = "memory"

    def __init__(self, budget: Optional[int] = None, eviction_ratio: float = DEFAULT_EVICTION_RATIO) -> None:
        self._pages: dict[str, bytes] = {}
        self.lru = LruBudget(budget, eviction_ratio, drop=self._pages.pop)

    def exists_prefix(self, keys: Sequence[str]) -> int:
        for count, key in enumerate(keys):
            if key not in self._pages:
                return count
        return len(keys)

    def exists_each(self, keys: Sequence[str]) -> list[bool]:
        return [key in self._pages for key in keys]

    def get(self, keys: Sequence[str]) -> list[Optional[bytes]]:
        out = []
        for key in keys:
            page = self._pages.get(key)
            if page is not None:
                self.lru.touch(key)
            out.append(page)
        return out

    def set(self, keys: Sequence[str], pages: Sequence[bytes]) -> list[bool]:
        check_batch(keys, pages)
        done = []
        for key, page in zip(keys, pages):
            if key in self._pages:  # content-addressed: the same key is the same page
                self.lru.touch(key)
                done.append(True)
            elif self.lru.reserve(key, len(page)):
                self._pages[key] = bytes(page)
                self.lru.commit(key)
                done.append(True)
            else:
                done.append(False)
        return done

    def stored_keys(self) -> list[str]:
        return sorted(self._pages)

    def clear(self) -> None:
        self._pages.clear()
        self.lru.clear()

    def stats(self) -> dict:
        return {"backend": self.name, **self.lru.stats()}


def check_batch(keys: Sequence[str], pages: Sequence[bytes]) -> None:
    """A ``set`` pairs keys with pages; a mismatch is a caller bug, not a refusal."""
    if len(keys) != len(pages):
        raise ValueError(f"{len(keys)} keys for {len(pages)} pages")
