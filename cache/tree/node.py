"""Tree nodes and their per-component data.

A node carries one ``ComponentData`` per registered component, indexed by the
component's position in the registry order (Full is always 0). ``value is None`` is a
tombstone: the component's data was evicted while the node stayed in the tree.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..basics.keys import TOKEN_BYTES, unpack_tokens


class ComponentData:
    __slots__ = ("value", "lock_ref", "metadata", "host_value", "host_lock_ref", "session_ref", "session_ids")

    def __init__(self) -> None:
        self.value: Optional[torch.Tensor] = None
        self.lock_ref = 0
        self.metadata: dict = {}
        # Reserved for a host tier (HiCache); this project keeps them empty.
        self.host_value: Optional[torch.Tensor] = None
        self.host_lock_ref = 0
        # Session radix cache (session_refs.py): how many sessions' coverage holds this
        # node, and the sessions whose frontier leaf it is (None: none).
        self.session_ref = 0
        self.session_ids: Optional[set[str]] = None


class TreeNode:
    __slots__ = (
        "id",
        "parent",
        "children",
        "key",
        "namespace",
        "length",
        "data",
        "last_access_time",
        "creation_time",
        "hit_count",
        "priority",
        "tlru_prefix_len",
        "tlru_history_len",
        "lru_prev",
        "lru_next",
        "lru_label",
        "in_leaf_set",
        "child_key",
        "page_hashes",
        "event_hashes",
    )

    def __init__(self, node_id: int, num_components: int, clock: float) -> None:
        self.id = node_id
        self.parent: Optional[TreeNode] = None
        self.children: dict = {}
        self.key = b""  # packed int32 tokens of this node's edge
        self.namespace = None  # extra_key, or keys.Namespace with a cache_salt or bigram head
        self.length = 0  # tokens on the edge
        self.data = [ComponentData() for _ in range(num_components)]
        self.last_access_time = clock
        self.creation_time = clock
        self.hit_count = 0
        self.priority = 0
        # TLRU only (0 under other policies): tokens from the root to this node's end, and
        # the branch's high-water depth, which eviction never lowers (leaf_policies.py)
        self.tlru_prefix_len = 0
        self.tlru_history_len = 0
        # Intrusive links, one pair per component LRU list.
        self.lru_prev: list[Optional[TreeNode]] = [None] * num_components
        self.lru_next: list[Optional[TreeNode]] = [None] * num_components
        self.lru_label: list[Optional[int]] = [None] * num_components  # order key, see lru.py
        self.in_leaf_set = False
        self.child_key = None  # the key the parent files this node under (first page)
        # one content hash per page (page_hash.py), kept while the tree hashes pages (a
        # storage tier or KV events); event_hashes differ only for an extra_key/salt node
        self.page_hashes: Optional[list[str]] = None
        self.event_hashes: Optional[list[str]] = None

    @property
    def token_ids(self) -> list[int]:
        return unpack_tokens(self.key)

    def set_key(self, data: bytes) -> None:
        self.key = data
        self.length = len(data) // TOKEN_BYTES

    def __repr__(self) -> str:
        return f"TreeNode(id={self.id}, len={self.length})"


def path_starts(tree, nodes: list) -> dict[int, int]:
    """node id -> tokens on the path above it, for ``nodes`` (each parent chain walked
    once); LookupError when a chain runs longer than the tree (its parent links loop)."""
    starts = {tree.root.id: 0}
    limit = len(tree.nodes) + 1  # a parent chain longer than the tree loops
    for node in nodes:
        chain, cur = [], node
        while cur.id not in starts:
            chain.append(cur)
            cur = cur.parent
            if len(chain) > limit:
                raise LookupError(f"node {node.id}: its parent links loop")
        at = starts[cur.id] + cur.length
        for child in reversed(chain):
            starts[child.id] = at
            at += child.length
    return starts
