"""The sidecar's invariants and match proof, apart from the component's behaviour: the
checker calls ``check``, ``probe``, ``verify_match`` and, for its host copies,
``check_host`` (the registry names this module)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from ...basics.violation import Violation
from ...pools.balance import pool_balance
from ...pools.kv_buffer import continue_fingerprints, node_path_fingerprints, prefix_hashes
from ...tree.columns import NodeColumns
from ...tree.node import path_starts
from .entries import entries_agree, strides_ending_in

if TYPE_CHECKING:
    from .component import SidecarComponent


def check(sidecar: SidecarComponent, cols: Optional[NodeColumns] = None) -> list[tuple[str, str]]:
    """Each node's entries are exactly those of the strides ending in its span, each
    holding the compressed KV of the prefix up to its boundary; then the pool balance.
    ``cols``: the sweep's columns over every registered node (built here when None)."""
    tree, pool, i = sidecar.tree, sidecar.pool, sidecar.index
    cols = cols if cols is not None else NodeColumns.of_tree(tree)
    out: list[tuple[str, str]] = []
    starts = path_starts(tree, cols.nodes)
    rows = [k for k, v in enumerate(cols.values[i]) if v is not None]
    good = []
    for k in rows:
        node, value = cols.nodes[k], cols.values[i][k]
        want = strides_ending_in(starts[node.id], node.length, sidecar.stride)
        if value.dim() != 1 or value.shape[0] != want or want == 0 or value.dtype is not torch.int64:
            out.append(("sidecar.value_len", f"node {node.id} holds {tuple(value.shape)} entries, "
                                             f"{want} stride(s) end in its span"))
        else:
            good.append(node)
    tree_slots = _cat([n.data[i].value for n in good], pool.device)
    if good:
        for node in _wrong_entries(sidecar, good, starts, tree_slots):
            out.append(("sidecar.entry_boundary", f"node {node.id}: an entry does not hold the KV of its stride's prefix"))
    out.extend(pool_balance(pool.allocator, tree_slots, []))
    return out


def _wrong_entries(sidecar: SidecarComponent, nodes: list, starts: dict[int, int], slots: torch.Tensor,
                   pool=None) -> list:
    """The nodes whose entries' fingerprints (or entry tensors) disagree with the
    prefix fingerprints at their stride boundaries, every node in one batch; ``slots``
    are in ``pool`` (default: the device's; the host tier's for host copies)."""
    device, stride = sidecar.pool.device, sidecar.stride
    parents = node_path_fingerprints(nodes, targets=[n.parent for n in nodes])
    per_token = continue_fingerprints([n.key for n in nodes], [fp or 0 for fp in parents], device)
    picks, owner, offset = [], [], 0
    for k, node in enumerate(nodes):
        start = starts[node.id]
        first = (start // stride + 1) * stride
        for end in range(first, start + node.length + 1, stride):
            picks.append(offset + end - start - 1)
            owner.append(k)
        offset += node.length
    want = per_token[torch.tensor(picks, dtype=torch.int64, device=device)]
    pool = sidecar.pool if pool is None else pool
    slots = slots.to(pool.fingerprint.device)
    bad = (pool.fingerprint[slots] != want.to(pool.fingerprint.device)) | ~entries_agree(pool, slots)
    flagged = sorted({owner[j] for j in bad.nonzero().flatten().tolist()})
    return [nodes[k] for k in flagged]


def _cat(values: list, device) -> torch.Tensor:
    if not values:
        return torch.empty(0, dtype=torch.int64, device=device)
    return values[0] if len(values) == 1 else torch.cat(values)


def probe(sidecar: SidecarComponent, nodes: list) -> bool:
    """The incremental probe: each touched node's entries (count, owned slots, right
    fingerprints) and the pool balance from the counters. False: let the sweep name it."""
    tree, pool, i = sidecar.tree, sidecar.pool, sidecar.index
    held = [n for n in nodes if n.data[i].value is not None]
    if held:
        starts = path_starts(tree, held)
        for node in held:
            value = node.data[i].value
            want = strides_ending_in(starts[node.id], node.length, sidecar.stride)
            if value.dim() != 1 or value.shape[0] != want or want == 0:
                return False
        slots = _cat([n.data[i].value for n in held], pool.device)
        if not pool.allocator.all_owned(slots) or _wrong_entries(sidecar, held, starts, slots):
            return False
    return pool.available_size() + tree.evictable[i] + tree.protected[i] == pool.size


def verify_match(sidecar: SidecarComponent, tokens: list[int], result) -> list[Violation]:
    """A match ends on a stride boundary whose entry holds the KV of exactly the
    matched prefix."""
    n = int(result.device_indices.shape[0])
    if n == 0:
        return []
    if n % sidecar.stride:
        return [Violation("match.sidecar_boundary", f"match of {n} tokens does not end on a stride boundary ({sidecar.stride})")]
    end = result.last_device_node  # the device prefix's end (a host hit may go on below it)
    node = sidecar.tree.nodes.get(end)
    value = None if node is None else node.data[sidecar.index].value
    if value is None or value.shape[0] == 0:
        return [Violation("match.sidecar_entry", f"match of {n} tokens ends on node {end} with no entry")]
    expected = int(prefix_hashes(tokens[:n])[-1])
    if int(sidecar.pool.fingerprint[value[-1]]) != expected:
        return [Violation("match.sidecar_entry", f"the entry at node {end} is not the KV of the first {n} tokens")]
    return []


def check_host(sidecar: SidecarComponent, pool, nodes: list) -> list[tuple[str, str]]:
    """The host tier: each host copy among ``nodes`` holds one entry per stride ending
    in its node's span, each the compressed KV of the prefix up to its boundary (as
    a device entry does), so a load-back brings back the right entries."""
    i = sidecar.index
    held = [n for n in nodes if n.data[i].host_value is not None]
    if not held:
        return []
    out, good = [], []
    starts = path_starts(sidecar.tree, held)
    for node in held:
        value = node.data[i].host_value
        want = strides_ending_in(starts[node.id], node.length, sidecar.stride)
        if value.dim() != 1 or value.shape[0] != want or want == 0:
            out.append(("sidecar.host_value_len", f"node {node.id} host copy holds {tuple(value.shape)} entries, "
                                                  f"{want} stride(s) end in its span"))
        else:
            good.append(node)
    if good:
        slots = _cat([n.data[i].host_value for n in good], pool.fingerprint.device)
        for node in _wrong_entries(sidecar, good, starts, slots, pool):
            out.append(("sidecar.host_entry", f"node {node.id}: a host entry does not hold the KV of its stride's prefix"))
    return out
