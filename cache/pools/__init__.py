"""Where cache data lives in memory: the page allocator, the slot pools, the
fingerprinted KV buffer (and what its hashes remember) and the host pools. Pools know slots and bytes, never the tree.

May import: ``basics``."""

from .allocator import PagedAllocator
from .kv_buffer import KVFingerprintBuffer, prefix_fingerprints, prefix_hashes

__all__ = ["KVFingerprintBuffer", "PagedAllocator", "prefix_fingerprints", "prefix_hashes"]
