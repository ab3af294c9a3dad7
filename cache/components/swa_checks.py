"""SWA invariants and match proof, kept apart from the component's behaviour."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..invariants import Violation, pool_balance

if TYPE_CHECKING:
    from .swa import SWAComponent


def check_swa(swa: SWAComponent) -> list[tuple[str, str]]:
    tree, pool, i = swa.tree, swa.pool, swa.index
    out: list[tuple[str, str]] = []
    tree_pages: list[int] = []
    uuids: dict[int, int] = {}
    for node in tree.nodes.values():
        if node is tree.root:
            continue
        cd, full = node.data[i], node.data[0].value
        uuid = cd.metadata.get("uuid")
        if uuid is not None:
            if uuid in uuids:
                out.append(("swa.uuid_unique", f"boundary uuid {uuid} on nodes {uuids[uuid]} and {node.id}"))
            uuids[uuid] = node.id
        if full is None:
            continue
        mapped = pool.translate(full)
        if cd.value is None:
            if bool((mapped >= 0).any()):
                out.append(("swa.orphan", f"node {node.id} is an SWA tombstone but its Full slots still map to SWA slots"))
            continue
        if cd.value.shape[0] != node.length:
            out.append(("swa.value_len", f"node {node.id} SWA value {cd.value.shape[0]} != key {node.length}"))
        elif bool((cd.value < 0).any()):
            out.append(("swa.unmapped", f"node {node.id} SWA value holds positions with no SWA slot"))
        elif not torch.equal(cd.value, mapped):
            out.append(("swa.translation", f"node {node.id} SWA value differs from the translation of its Full value"))
        tree_pages.extend(pool.allocator.page_ids(cd.value).tolist())
    out.extend(pool_balance(pool.allocator, tree_pages, swa.held_by_requests()))
    out.extend(_check_window_locks(swa))
    return out


def _check_window_locks(swa: SWAComponent) -> list[tuple[str, str]]:
    """Every held receipt's SWA segment reaches its boundary (or the root), covers a
    window, and holds a lock on each node."""
    tree, out = swa.tree, []
    for receipt in tree.live_receipts.values():
        if receipt.swa_released or swa.name in receipt.skipped_lock_components:
            continue
        node = tree.nodes.get(receipt.node_id)
        if node is None:
            continue
        covered, boundary = 0, receipt.component_lock_uuids.get(swa.name)
        try:
            for cur in swa._segment(node, receipt):
                covered += cur.length
                if cur.data[swa.index].lock_ref <= 0:
                    out.append(("swa.window_lock", f"receipt {receipt.receipt_id}: node {cur.id} in its segment is unlocked"))
        except LookupError as exc:
            out.append(("swa.window_lock", f"receipt {receipt.receipt_id}: {exc}"))
            continue
        if boundary is not None and covered < swa.window:
            out.append(("swa.window_lock", f"receipt {receipt.receipt_id} covers {covered} < window {swa.window}"))
    return out


def verify_swa_match(swa: SWAComponent, tokens: list[int], result) -> list[Violation]:
    """The match's last window of positions has live SWA slots holding the right KV."""
    indices = result.device_indices
    n = int(indices.shape[0])
    if n == 0:
        return []
    tail = max(0, n - swa.window)
    mapped = swa.pool.translate(indices[tail:])
    if bool((mapped < 0).any()):
        return [Violation("match.swa_window", f"a position in the last {n - tail} matched tokens has no live SWA KV")]
    from ..pools.kv_buffer import prefix_fingerprints

    expected = prefix_fingerprints(tokens[:n], swa.pool.device)[tail:]
    bad = (swa.pool.buffer.read(mapped) != expected).nonzero().flatten().tolist()
    if bad:
        return [Violation("match.swa_fingerprint", f"{len(bad)} SWA slot(s) hold the wrong KV, first at position {tail + bad[0]}")]
    return []
