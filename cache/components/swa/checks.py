"""SWA's invariants and match proof, apart from the component's behaviour: the checker
calls ``check``, ``probe`` and ``verify_match`` (the registry names this module)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import numpy as np
import torch

from ...basics.numpy_views import gather, host_cat
from ...basics.violation import Violation
from ...pools.balance import owned_pages, pool_balance, segment_pages
from ...tree.columns import NodeColumns
from ...tree.locks import fresh_groups

if TYPE_CHECKING:
    from .component import SWAComponent


def check(swa: SWAComponent, cols: Optional[NodeColumns] = None) -> list[tuple[str, str]]:
    """Per node: a tombstone maps no Full slot to SWA; live SWA data is exactly the
    translation of the node's Full slots. Then the pool balance and the window locks.
    ``cols``: the sweep's columns over every registered node (built here when None).
    Every node is screened at once (one translation of all Full slots, one comparison,
    per-node counts by bincount); only the nodes it flags are checked one by one."""
    tree, pool, i = swa.tree, swa.pool, swa.index
    cols = cols if cols is not None else NodeColumns.of_tree(tree)
    out: list[tuple[str, str]] = []
    nodes, values = cols.nodes, cols.values[i]
    tagged = [(node, m.get("uuid")) for node, m in zip(nodes, [cd.metadata for cd in cols.data[i]]) if m]
    uuids = [u for _, u in tagged if u is not None]
    if len(set(uuids)) != len(uuids):
        out.extend(_duplicate_uuids(tagged))
    suspects, pages = _screen(pool, cols, values)
    for k in suspects:
        node, full, value = nodes[k], cols.values[0][k], values[k]
        mapped = pool.translate(full)
        if value is None:
            if bool((mapped >= 0).any()):
                out.append(("swa.orphan", f"node {node.id} is an SWA tombstone but its Full slots still map to SWA slots"))
        elif value.shape[0] != node.length:
            out.append(("swa.value_len", f"node {node.id} SWA value {value.shape[0]} != key {node.length}"))
        elif bool((value < 0).any()):
            out.append(("swa.unmapped", f"node {node.id} SWA value holds positions with no SWA slot"))
        elif not torch.equal(value, mapped):
            out.append(("swa.translation", f"node {node.id} SWA value differs from the translation of its Full value"))
    held = segment_pages(pool.allocator, held_swa_values(swa))
    out.extend(pool_balance(pool.allocator, pages, held))
    out.extend(_check_window_locks(swa))
    return out


def _duplicate_uuids(tagged: list) -> list[tuple[str, str]]:
    out, seen = [], {}
    for node, uuid in tagged:
        if uuid is None:
            continue
        if uuid in seen:
            out.append(("swa.uuid_unique", f"boundary uuid {uuid} on nodes {seen[uuid]} and {node.id}"))
        seen[uuid] = node.id
    return out


def _screen(pool, cols: NodeColumns, values: list) -> tuple[list[int], torch.Tensor]:
    """Positions of the nodes with Full KV whose SWA side may be wrong (a tombstone
    with mapped slots; SWA data of another length than the Full value, or of the
    key's; a negative entry, or one differing from the translation), and the SWA pages
    of every node with both Full and SWA data, each node's pages once."""
    fulls, full_lengths = cols.values[0], cols.full_lengths
    slots, owner = cols.full_slots, cols.full_owner
    mapped = pool.translate(slots)
    swa_lengths = [-1 if v is None else v.shape[0] for v in values]
    live = [k for k, (v, f) in enumerate(zip(values, fulls)) if v is not None and f is not None]
    same = [k for k in live if swa_lengths[k] == full_lengths[k]]
    suspects = {k for k in live if swa_lengths[k] != full_lengths[k] or full_lengths[k] != cols.lengths[k]}
    tomb = _mask([v is None and f is not None for v, f in zip(values, fulls)], slots.device)
    suspects.update((tomb & (torch.bincount(owner[mapped >= 0], minlength=len(values)) > 0)).nonzero().flatten().tolist())
    in_same = _mask([m == f and v is not None for m, f, v in zip(swa_lengths, full_lengths, fulls)], slots.device)[owner]
    cat, owner_same = _cat([values[k] for k in same], slots), owner[in_same]
    suspects.update(torch.unique(owner_same[(cat < 0) | (cat != mapped[in_same])]).tolist())
    if len(same) == len(live):
        pages = owned_pages(pool.allocator, cat, owner_same)
    else:
        pages = segment_pages(pool.allocator, [values[k] for k in live])
    return sorted(suspects), pages


def _mask(flags: list[bool], device) -> torch.Tensor:
    """A bool tensor from a list of bools (through bytes: far faster than torch.tensor)."""
    if not flags:
        return torch.zeros(0, dtype=torch.bool, device=device)
    return torch.frombuffer(bytearray(flags), dtype=torch.bool).to(device)


def _cat(values: list, like: torch.Tensor) -> torch.Tensor:
    if not values:
        return like[:0]
    return values[0] if len(values) == 1 else torch.cat(values)


def held_swa_values(swa: SWAComponent) -> list[torch.Tensor]:
    """The live SWA slots each running request holds (mapped from its own Full slots)."""
    out = []
    for req in swa.cache.kv_holders():
        mapped = swa.pool.translate(req.own_indices)
        out.append(mapped[mapped >= 0])
    return out


def _check_window_locks(swa: SWAComponent, groups: Optional[dict] = None) -> list[tuple[str, str]]:
    """Every held receipt's SWA segment reaches its boundary (or the root), covers a
    window, and holds a lock on each node. Receipts filed in one group (``groups``, by
    default filed afresh from the held receipts) share their segment: it is walked once."""
    tree, out = swa.tree, []
    if groups is None:
        groups = fresh_groups(tree)
    for group in groups.values():
        receipt = next(iter(group.values()))
        if receipt.swa_released or swa.name in receipt.skipped_lock_components:
            continue
        node = tree.nodes.get(receipt.node_id)
        if node is None:
            continue
        out.extend(("swa.window_lock", f"receipt {r}{problem}") for problem in _window_problems(swa, node, receipt) for r in group)
    return out


def _window_problems(swa: SWAComponent, node, receipt) -> list[str]:
    """What is wrong with one receipt's window lock, each said after its receipt id."""
    covered, boundary, out = 0, receipt.component_lock_uuids.get(swa.name), []
    try:
        segment, missing = swa._segment(node, receipt), None
    except LookupError as exc:  # its boundary is not above it: every node up to the root is read
        segment, missing, cur = [], exc, node
        while cur is not swa.tree.root:
            segment.append(cur)
            cur = cur.parent
    for cur in segment:
        covered += cur.length
        if cur.data[swa.index].lock_ref <= 0:
            out.append(f": node {cur.id} in its segment is unlocked")
    if missing is not None:
        return [*out, f": {missing}"]
    if boundary is not None and covered < swa.window:
        out.append(f" covers {covered} < window {swa.window}")
    return out


def probe(swa: SWAComponent, nodes: list) -> bool:
    """The incremental probe: the touched nodes' SWA data against their Full slots (all
    at once), each boundary uuid against its parent's and children's, the pool balance
    from the counters, and the held receipts' window locks. False: let the sweep name it."""
    tree, pool, i = swa.tree, swa.pool, swa.index
    nodes = [n for n in nodes if n.data[0].value is not None]  # the generic probe fails the others
    if nodes and not _translations_ok(pool, i, nodes):
        return False
    for node in nodes:
        uuid = node.data[i].metadata.get("uuid")
        if uuid is not None:
            near = [node.parent, *node.children.values()]
            if any(n is not None and n.data[i].metadata.get("uuid") == uuid for n in near):
                return False
    held = sum(segment_pages(pool.allocator, [v]).numel() for v in held_swa_values(swa)) * pool.allocator.page_size
    if pool.available_size() + tree.evictable[i] + tree.protected[i] + held != pool.size:
        return False
    return not _check_window_locks(swa, tree.held_lock_groups())


def _translations_ok(pool, i: int, nodes: list) -> bool:
    """Tombstones map none of their Full slots; live SWA data has the key's length, no
    negative entry, equals the translation and sits on pages the pool handed out
    (read on the host: a few slots a step)."""
    fulls = [n.data[0].value for n in nodes]
    values = [n.data[i].value for n in nodes]
    if any(v is not None and (v.shape[0] != n.length or v.shape[0] != f.shape[0]) for n, f, v in zip(nodes, fulls, values)):
        return False
    mapped = gather(pool.mapping, host_cat(fulls))
    present = [v for v in values if v is not None]
    if len(present) < len(values):  # tombstones among them: their slots must map to nothing
        live = np.repeat(np.array([v is not None for v in values]), [f.shape[0] for f in fulls])
        if (mapped[~live] >= 0).any():
            return False
        if not present:
            return True
        mapped = mapped[live]
    cat = host_cat(present)
    return bool(cat.min() >= 0) and np.array_equal(cat, mapped) and pool.allocator.all_owned(cat)


def verify_match(swa: SWAComponent, tokens: list[int], result) -> list[Violation]:
    """The match's last window of positions has live SWA slots holding the right KV."""
    indices = result.device_indices
    n = int(indices.shape[0])
    if n == 0:
        return []
    tail = max(0, n - swa.window)
    mapped = swa.pool.translate(indices[tail:])
    live = mapped >= 0
    if not bool(live.all()) and swa.gates_prefix_match:  # ungated, the tree need not own the window
        return [Violation("match.swa_window", f"a position in the last {n - tail} matched tokens has no live SWA KV")]
    from ...pools.kv_buffer import prefix_fingerprints

    expected = prefix_fingerprints(tokens[:n], swa.pool.device)[tail:]
    wrong = (swa.pool.buffer.read(mapped[live]) != expected[live]).nonzero().flatten()
    bad = live.nonzero().flatten()[wrong].tolist()
    if bad:
        return [Violation("match.swa_fingerprint", f"{len(bad)} SWA slot(s) hold the wrong KV, first at position {tail + bad[0]}")]
    return []
