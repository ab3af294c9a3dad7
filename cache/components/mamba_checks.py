"""Mamba invariants and match proof, kept apart from the component's behaviour."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..invariants import Violation, pool_balance
from ..pools.kv_buffer import prefix_fingerprints

if TYPE_CHECKING:
    from .mamba import MambaComponent


def _path_tokens(node) -> list[int]:
    parts = []
    while node.parent is not None:
        parts.append(node.token_ids)
        node = node.parent
    return [t for part in reversed(parts) for t in part]


def check_mamba(mamba: MambaComponent) -> list[tuple[str, str]]:
    tree, pool, i = mamba.tree, mamba.pool, mamba.index
    out: list[tuple[str, str]] = []
    tree_slots: list[int] = []
    for node in tree.nodes.values():
        if node is tree.root:
            continue
        value = node.data[i].value
        if value is None:
            continue
        if value.shape != (1,):
            out.append(("mamba.value_len", f"node {node.id} holds {tuple(value.shape)} state slots, not 1"))
            continue
        tree_slots.append(int(value[0]))
        path = _path_tokens(node)
        expected = int(prefix_fingerprints(path, pool.device)[-1])
        if pool.fingerprint_of(value) != expected:
            out.append(("mamba.state_boundary", f"node {node.id}: its state was not taken at this node's boundary"))
        elif not pool.consistent(value):
            out.append(("mamba.state_tensors", f"node {node.id}: conv/ssm tensors disagree with the state's fingerprint"))
    held = [s for req in mamba.cache.requests.values() for s in mamba.held_slots(req)]
    out.extend(pool_balance(pool.allocator, tree_slots, held))
    out.extend(_check_lock_order(mamba))
    return out


def _check_lock_order(mamba: MambaComponent) -> list[tuple[str, str]]:
    """On a locked anchor: Full lock >= SWA lock >= Mamba lock."""
    tree, out = mamba.tree, []
    swa = tree.by_name.get("swa")
    for receipt in tree.live_receipts.values():
        node = tree.nodes.get(receipt.node_id)
        if node is None or node is tree.root:
            continue
        full = node.data[0].lock_ref
        middle = node.data[swa.index].lock_ref if swa is not None else full
        m = node.data[mamba.index].lock_ref
        if not full >= middle >= m and not receipt.skipped_lock_components:
            out.append(("lock.order", f"node {node.id}: full {full}, swa {middle}, mamba {m} locks out of order"))
    return out


def verify_mamba_match(mamba: MambaComponent, tokens: list[int], result) -> list[Violation]:
    """A match ends on a node whose state is the state of exactly the matched prefix."""
    n = int(result.device_indices.shape[0])
    if n == 0:
        return []
    node = mamba.tree.nodes.get(result.best_match_node)
    value = None if node is None else node.data[mamba.index].value
    if value is None:
        return [Violation("match.mamba_state", f"match of {n} tokens ends on node {result.best_match_node} with no state")]
    expected = int(prefix_fingerprints(tokens[:n], mamba.pool.device)[-1])
    if mamba.pool.fingerprint_of(value) != expected:
        return [Violation("match.mamba_state", f"the state at node {result.best_match_node} is not the state after {n} tokens")]
    return []
