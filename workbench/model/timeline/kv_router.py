"""The router's view: what a KV-aware router (dynamo's indexer, sgl-router) believes a
cache holds after replaying its KV events, checked against what the cache holds.

A router keeps, per medium, the set of block ids it was told about: BlockStored adds,
BlockRemoved takes away (a block it never saw is its "Failed to find block", as in
sgl-project/sglang#38429), AllBlocksCleared empties. Events speak for Full KV only, so
after every step the view must equal exactly {(block, "GPU") for each page of a node
with device Full KV} and {(block, "CPU_PINNED") for each page of a node with a host Full
copy whose backup was acknowledged} (SGLang publishes a host copy at its ack: held
transfers reach the router at the flush). The first step where they differ is reported as an invariant violation.
"""

from __future__ import annotations

from typing import Optional

from cache import Violation
from cache.observe.kv_events import CPU, GPU, AllBlocksCleared, BlockRemoved, BlockStored
from cache.basics.page_hash import as_int64

ROUTER_VIEW = "kv_events.router_view"
UNKNOWN_BLOCK = "kv_events.unknown_block"
_SHOWN = 4  # block ids named per node in a message


class RouterView:
    def __init__(self) -> None:
        self.blocks: dict[str, set[int]] = {GPU: set(), CPU: set()}

    def apply(self, events) -> list[Violation]:
        """Replay ``events``; a removal of a block the view does not hold is a violation."""
        out = []
        for event in events:
            if isinstance(event, BlockStored):
                self.blocks.setdefault(event.medium, set()).update(event.block_hashes)
            elif isinstance(event, BlockRemoved):
                held = self.blocks.setdefault(event.medium, set())
                unknown = [b for b in event.block_hashes if b not in held]
                held.difference_update(event.block_hashes)
                if unknown:
                    out.append(Violation(UNKNOWN_BLOCK, f"BlockRemoved({event.medium}) of block(s) the router never "
                                                        f"saw stored: {_ids(unknown)} (its 'Failed to find block')"))
            elif isinstance(event, AllBlocksCleared):
                for held in self.blocks.values():
                    held.clear()
        return out

    def check(self, cache) -> list[Violation]:
        """The view against the cache's Full pages on each tier, naming each node that
        differs and the blocks missing from (or extra in) the router's view."""
        held, owners = cache_blocks(cache)
        out = []
        for medium in (GPU, CPU):
            want, have = held[medium], self.blocks.get(medium, set())
            if want == have:
                continue
            for word, blocks in (("missing", want - have), ("extra", have - want)):
                by_node: dict[Optional[int], list[int]] = {}
                for block in blocks:
                    by_node.setdefault(owners.get(block), []).append(block)
                for node_id in sorted(by_node, key=lambda n: -1 if n is None else n):
                    where = "no node" if node_id is None else f"node #{node_id}"
                    verb = "holds on" if word == "missing" else "does not hold on"
                    out.append(Violation(ROUTER_VIEW, f"{word} {medium} block(s) {_ids(by_node[node_id])}: {where} "
                                                      f"{verb} {medium}, the replayed events say otherwise"))
        return out


def cache_blocks(cache) -> tuple[dict[str, set[int]], dict[int, int]]:
    """({medium: block ids the cache holds there, a host copy once its backup is acked},
    {block id: the node it names})."""
    held: dict[str, set[int]] = {GPU: set(), CPU: set()}
    owners: dict[int, int] = {}
    tree = cache.tree
    for node in tree.nodes.values():
        if node is tree.root or node.event_hashes is None:
            continue
        full = node.data[0]
        blocks = [as_int64(h) for h in node.event_hashes]
        owners.update(dict.fromkeys(blocks, node.id))
        if full.value is not None:
            held[GPU].update(blocks)
        if full.host_value is not None and full.metadata.get("transfer", ("",))[0] != "backup":
            held[CPU].update(blocks)
    return held, owners


def _ids(blocks) -> str:
    blocks = sorted(blocks)
    shown = ", ".join(str(b) for b in blocks[:_SHOWN])
    return f"[{shown}{', …' if len(blocks) > _SHOWN else ''}] ({len(blocks)})"
