"""The storage tier's backends (SGLang's L3): where backed-up pages go by content hash."""

from .backend import MemoryBackend, StorageBackend

__all__ = ["MemoryBackend", "StorageBackend"]
