"""The storage tier's backends (SGLang's L3): where backed-up pages go by content hash."""

from __future__ import annotations

from typing import Optional

from .backend import BATCH_PAGES, MemoryBackend, StorageBackend
from .budget import DEFAULT_EVICTION_RATIO, LruBudget
from .file import FileBackend
from .injector import Fired, Rule, StorageInjector, transfer_delay

BACKEND_KINDS = ("memory", "file")
_OPTIONS = {"memory": ("eviction_ratio",), "file": ("eviction_ratio", "write_hook")}


def make_backend(kind: str, path: Optional[str] = None, budget: Optional[int] = None, **options) -> StorageBackend:
    """The backend a config names. ``budget`` is in payload bytes (None = unlimited);
    ``eviction_ratio`` (default 0.9, SGLang's) is the watermark one overflow evicts to."""
    if kind not in BACKEND_KINDS:
        raise ValueError(f"unknown storage backend {kind!r}: choose one of {', '.join(BACKEND_KINDS)}")
    unknown = sorted(set(options) - set(_OPTIONS[kind]))
    if unknown:
        raise ValueError(f"storage backend {kind!r} takes no option {', '.join(unknown)}"
                         f" (it takes path, budget, {', '.join(_OPTIONS[kind])})")
    if kind == "memory":
        if path is not None:
            raise ValueError("the memory storage backend keeps no files: give no path")
        return MemoryBackend(budget, **options)
    if not path:
        raise ValueError("the file storage backend needs a path (a directory it owns)")
    return FileBackend(path, budget, **options)


__all__ = ["BACKEND_KINDS", "BATCH_PAGES", "DEFAULT_EVICTION_RATIO", "FileBackend", "Fired", "LruBudget", "MemoryBackend",
           "Rule", "StorageBackend", "StorageInjector", "make_backend", "transfer_delay"]
