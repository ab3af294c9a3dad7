"""KV events: where a cache's Full KV pages live, told to the outside as SGLang 0.5.23
tells a KV-aware router (``enable_kv_cache_events``).

Not the internal observer bus (events.py, node ids, off when nobody watches): this is
SGLang's public stream. Each page is named by its block id, the first 64 bits of its
page hash (page_hash.py), and each event says on which medium: "GPU" (device Full KV)
or "CPU_PINNED" (its host copy). SGLang defines a DISK medium but 0.5.23 never emits
it, so neither do we. The tree core records at the same places SGLang's tree core does
(a store per page, a removal per node) while the node and its hashes still exist; a
consumer ``take``s the queue once per step. Field names are SGLang's, so a stream
compares to SGLang's event by event.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Union

from ..basics.keys import TOKEN_BYTES, namespace_parts, unpack_tokens
from ..basics.page_hash import as_int64

GPU = "GPU"
CPU = "CPU_PINNED"


@dataclasses.dataclass
class BlockStored:
    block_hashes: list[int]
    parent_block_hash: Optional[int]  # the block before the first one (None under the root)
    token_ids: list  # the pages' tokens (an EAGLE bigram key: (previous, token) pairs)
    block_size: int  # tokens per page
    lora_id: Optional[int] = None  # always None in 0.5.23
    medium: str = GPU
    cache_salt: Optional[str] = None
    session_id: Optional[str] = None
    lora_name: Optional[str] = None


@dataclasses.dataclass
class BlockRemoved:
    block_hashes: list[int]
    medium: str = GPU


@dataclasses.dataclass
class AllBlocksCleared:
    pass


KVEvent = Union[BlockStored, BlockRemoved, AllBlocksCleared]


def event_dict(event: KVEvent) -> dict:
    """An event as one JSON object: its type, then SGLang's fields."""
    return {"type": type(event).__name__, **dataclasses.asdict(event)}


class KVEventRecorder:
    """The queue one tree core fills. ``enabled`` False (the default): callers skip it
    (``if tree.kv_events.enabled``), so a cache without events pays one attribute read."""

    def __init__(self, tree) -> None:
        self.tree = tree
        self.enabled = False
        self._queue: list[KVEvent] = []

    def enable(self) -> None:
        """Record from now on; the tree hashes its pages (block ids are page hashes)."""
        self.enabled = True
        if not self.tree.page_hashing:
            self.tree.enable_page_hashes()

    def take(self) -> list[KVEvent]:
        """The events recorded since the last take (the queue is emptied)."""
        events, self._queue = self._queue, []
        return events

    def store(self, node, medium: str = GPU, session_id: Optional[str] = None) -> None:
        """``node``'s pages are now on ``medium``: one BlockStored per page, each linked
        to the page before it, coalesced into the queue's tail where they continue it.
        ``session_id``: the session whose insert brought them (attribution only)."""
        hashes = self._block_ids(node)
        parent = node.parent
        prior = parent.event_hashes if parent is not self.tree.root and parent.event_hashes else None
        link = as_int64(prior[-1]) if prior else None
        ps = self.tree.page_size
        tokens = self._units(node)
        salt = namespace_parts(node.namespace)[1]
        for i, block in enumerate(hashes):
            page = tokens[i * ps : (i + 1) * ps]
            self._enqueue(BlockStored([block], link, page, len(page), medium=medium, cache_salt=salt,
                                      session_id=session_id))
            link = block

    def remove(self, node, medium: str = GPU) -> None:
        """``node``'s pages left ``medium``: one BlockRemoved for the whole node."""
        hashes = self._block_ids(node)
        if hashes:
            self._enqueue(BlockRemoved(hashes, medium))

    def all_cleared(self) -> None:
        self._enqueue(AllBlocksCleared())

    def _block_ids(self, node) -> list[int]:
        if node.event_hashes is None:
            self.tree.hash_node(node)
        return [as_int64(h) for h in node.event_hashes]

    @staticmethod
    def _units(node) -> list:
        """The node's key units as events show them: tokens, or an EAGLE bigram key's pairs."""
        tokens = unpack_tokens(node.key)
        head = namespace_parts(node.namespace)[2]
        if head is None:
            return tokens
        parent = node.parent
        prev = head if not parent.length else unpack_tokens(parent.key[-TOKEN_BYTES:])[0]
        return [(a, b) for a, b in zip([prev] + tokens[:-1], tokens)]

    def _enqueue(self, event: KVEvent) -> None:
        """Append, merging into a compatible tail as SGLang's ``enqueue`` does: removals on
        the same medium; a store on the same medium and attribution whose parent is the
        tail's last block."""
        if self._queue:
            tail = self._queue[-1]
            if isinstance(tail, BlockRemoved) and isinstance(event, BlockRemoved):
                if tail.medium == event.medium:
                    tail.block_hashes.extend(event.block_hashes)
                    return
            elif isinstance(tail, BlockStored) and isinstance(event, BlockStored):
                if (tail.medium, tail.lora_id, tail.block_size, tail.cache_salt, tail.session_id, tail.lora_name) == \
                        (event.medium, event.lora_id, event.block_size, event.cache_salt, event.session_id,
                         event.lora_name) and tail.block_hashes and event.parent_block_hash == tail.block_hashes[-1]:
                    tail.block_hashes.extend(event.block_hashes)
                    tail.token_ids.extend(event.token_ids)
                    return
        self._queue.append(event)
