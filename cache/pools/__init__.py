"""Device pools: the page allocator and the fingerprinted KV buffer."""

from .allocator import PagedAllocator
from .kv_buffer import KVFingerprintBuffer, prefix_fingerprints, prefix_hashes

__all__ = ["KVFingerprintBuffer", "PagedAllocator", "prefix_fingerprints", "prefix_hashes"]
