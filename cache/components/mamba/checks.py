"""Mamba's invariants and match proof, apart from the component's behaviour: the
checker calls ``check``, ``probe`` and ``verify_match`` (the registry names this module)."""

from __future__ import annotations

import functools
import operator
from typing import TYPE_CHECKING, Optional

import torch

from ...basics.keys import TOKEN_BYTES, token_array
from ...basics.numpy_views import gather, host_cat, host_ints
from ...basics.violation import Violation
from ...pools.balance import pool_balance
from ...pools.kv_buffer import node_path_fingerprints, path_fingerprints, prefix_hashes
from ...tree.columns import NodeColumns
from ...tree.locks import fresh_groups

if TYPE_CHECKING:
    from .component import MambaComponent


def check(mamba: MambaComponent, cols: Optional[NodeColumns] = None) -> list[tuple[str, str]]:
    """Each state sits on the node whose path it represents (its fingerprint is that
    path's) and its tensors agree with its fingerprint; then the pool balance and the
    lock order. ``cols``: the sweep's columns over every registered node (built here
    when None). Path fingerprints come for the whole tree at once and the slots are
    read in one gather, so no torch call is made per node."""
    pool, i = mamba.pool, mamba.index
    cols = cols if cols is not None else NodeColumns.of_tree(mamba.tree)
    out: list[tuple[str, str]] = []
    values = cols.values[i]
    rows = [k for k, v in enumerate(values) if v is not None]
    odd = [k for k in rows if values[k].shape != (1,)]
    for k in odd:
        out.append(("mamba.value_len", f"node {cols.nodes[k].id} holds {tuple(values[k].shape)} state slots, not 1"))
    if odd:
        rows = [k for k in rows if values[k].shape == (1,)]
    nodes = [cols.nodes[k] for k in rows]
    tree_slots = torch.cat([values[k] for k in rows]) if rows else torch.empty(0, dtype=torch.int64, device=pool.device)
    if nodes:  # every registered node in one batch: then no ancestor is left to look up
        every = node_path_fingerprints(cols.nodes)
        want = [every[k] for k in rows]
        stored, consistent = state_fingerprints(pool, tree_slots)
        if None in want or any(map(operator.ne, stored, want)) or not all(consistent):
            out.extend(_state_violations(nodes, want, stored, consistent))
    req_slots = [s for req in mamba.cache.kv_holders() for s in mamba.held_slots(req)]
    out.extend(pool_balance(pool.allocator, tree_slots, req_slots))
    out.extend(_request_state_violations(mamba))
    out.extend(_check_lock_order(mamba))
    return out


def _state_violations(nodes: list, want: list, stored: list[int], consistent: list[bool]) -> list[tuple[str, str]]:
    out = []
    for node, expected, fp, ok in zip(nodes, want, stored, consistent):
        if expected is None:
            raise IndexError(f"node {node.id}: no token path to fingerprint (empty, or its parent links loop)")
        if fp != expected:
            out.append(("mamba.state_boundary", f"node {node.id}: its state was not taken at this node's boundary"))
        elif not ok:
            out.append(("mamba.state_tensors", f"node {node.id}: conv/ssm tensors disagree with the state's fingerprint"))
    return out


def state_fingerprints(pool, slots) -> tuple[list[int], list[bool]]:
    """Per slot: the recorded fingerprint, and whether the conv/ssm tensors still agree
    with it (``pool.fingerprint_of`` and ``pool.consistent``, batched on the host)."""
    slots = host_ints(slots)
    fps = gather(pool.fingerprint, slots)
    conv = gather(pool.conv, slots).reshape(len(slots), -1)
    ssm = gather(pool.ssm, slots).reshape(len(slots), -1)
    expect = (fps % 1_000_003).astype(conv.dtype)[:, None]
    return fps.tolist(), ((conv == expect).all(1) & (ssm == -expect).all(1)).tolist()


@functools.lru_cache(maxsize=4096)
def _state_after(packed: bytes) -> int:
    """The state fingerprint after these packed tokens: a running request's is checked
    every step and changes only when it computes more (the bytes are the memo's key)."""
    return int(prefix_hashes(token_array(packed))[-1])


def _request_state_violations(mamba: MambaComponent) -> list[tuple[str, str]]:
    """A running request's state is the state after the tokens it has computed."""
    out = []
    for req in mamba.cache.requests.values():
        if req.mamba_pool_idx is None or req.kv_len == 0:
            continue
        want = _state_after(bytes(req.token_bytes[: req.kv_len * TOKEN_BYTES]))
        if mamba.pool.fingerprint_of(req.mamba_pool_idx) != want:
            out.append(("mamba.request_state", f"request {req.rid}: its running state is not the state after its "
                                               f"{req.kv_len} computed tokens (a stale slot it started from?)"))
    return out


def probe(mamba: MambaComponent, nodes: list) -> bool:
    """The incremental probe: each touched node's state (one owned slot whose
    fingerprint is this path's, tensors consistent), the pool balance and the LRU size
    from the counters, and the lock order on held anchors. False: let the sweep name it."""
    tree, pool, i = mamba.tree, mamba.pool, mamba.index
    with_state = [n for n in nodes if n.data[i].value is not None]
    if with_state:
        values = [n.data[i].value for n in with_state]
        if any(v.shape != (1,) for v in values):
            return False
        slots = host_cat(values)
        if not pool.allocator.all_owned(slots):
            return False
        kept = mamba.cache.kv_buffer if getattr(mamba.cache, "fingerprints", True) else None
        want = path_fingerprints(with_state, kept)  # Full's slots of these nodes are verified first
        stored, consistent = state_fingerprints(pool, slots)
        if stored != want or not all(consistent):
            return False
    states = tree.evictable[i] + tree.protected[i]
    held = sum(len(mamba.held_slots(req)) for req in mamba.cache.kv_holders())
    if pool.available_size() + states + held != pool.size or tree.lru[mamba.name].size != states:
        return False
    if _request_state_violations(mamba):
        return False
    return not _check_lock_order(mamba, tree.held_lock_groups())


def _check_lock_order(mamba: MambaComponent, groups: Optional[dict] = None) -> list[tuple[str, str]]:
    """On a locked anchor, locks never grow down the eviction ranks: Full's >= SWA's
    >= ... >= Mamba's (each component ranked above Mamba by internal priority). Said
    once per receipt; receipts filed in one group (``groups``, by default filed afresh
    from the held receipts) share their anchor, so it is read once per group."""
    tree, out = mamba.tree, []
    if groups is None:
        groups = fresh_groups(tree)
    floor = mamba.eviction_priority(False)
    ranked = sorted((c for c in tree.components if c.eviction_priority(False) > floor),
                    key=lambda c: -c.eviction_priority(False)) + [mamba]
    for group in groups.values():
        receipt = next(iter(group.values()))
        node = tree.nodes.get(receipt.node_id)
        if node is None or node is tree.root or receipt.skipped_lock_components:
            continue
        locks = [node.data[c.index].lock_ref for c in ranked]
        if any(upper < lower for upper, lower in zip(locks, locks[1:])):
            said = ", ".join(f"{c.name} {lock}" for c, lock in zip(ranked, locks))
            out.extend([("lock.order", f"node {node.id}: {said} locks out of order")] * len(group))
    return out


def verify_match(mamba: MambaComponent, tokens: list[int], result) -> list[Violation]:
    """A match ends on a node whose state is the state of exactly the matched prefix."""
    n = int(result.device_indices.shape[0])
    if n == 0:
        return []
    end = result.last_device_node  # the device prefix's end (a host hit may go on below it)
    node = mamba.tree.nodes.get(end)
    value = None if node is None else node.data[mamba.index].value
    if value is None:
        return [Violation("match.mamba_state", f"match of {n} tokens ends on node {end} with no state")]
    expected = int(prefix_hashes(tokens[:n])[-1])
    if mamba.pool.fingerprint_of(value) != expected:
        return [Violation("match.mamba_state", f"the state at node {end} is not the state after {n} tokens")]
    return []
