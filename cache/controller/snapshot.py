"""Taking the inspection snapshot: the only surface the workbench reads.

Taking one copies plain ints and tuples out of the live tree into the records of
``observe/views.py``, so a snapshot stays valid (and comparable) after the cache moves
on; the timeline keeps one per step. Every function here reads a built
``UnifiedRadixCache`` (``cache``), which imports this module, not the other way round.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Mapping
from types import MappingProxyType
from typing import Optional

from ..basics.base_component import FULL
from ..basics.keys import TOKEN_BYTES, namespace_parts
from ..observe.views import (VALUE_END, CacheSnapshot, ComponentRecord, ComponentView, GlobalRecord, NodeRecord,
                             NodeView, PoolView, RequestView, SessionsView, SessionView, SlotView, StorageView,
                             StreamingSessionsView)


def storage_view(cache) -> Optional[StorageView]:
    storage = cache.host.storage if cache.host is not None else None
    if storage is None:
        return None
    return StorageView(storage.backend.name, storage.config.budget, tuple(storage.stored_keys()),
                       tuple((s.ack, s.node.id, len(s.keys)) for s in storage.in_flight), storage.stored_tokens,
                       storage.prefetch.view())


def sessions_view(cache) -> Optional[SessionsView]:
    refs = cache.session_refs
    if not refs.enabled:
        return None
    sids = sorted({sid for index in refs.by_component.values() for sid in index.leaves})
    leaves = {sid: MappingProxyType({k: tuple(v) for k, v in refs.leaves_of(sid).items()}) for sid in sids}
    coverage = {name: index.coverage for name, index in refs.by_component.items()}
    covered: dict[str, dict[str, Mapping[int, int]]] = {}
    for name, index in refs.by_component.items():
        for sid, by_leaf in index.covered_len.items():
            covered.setdefault(sid, {})[name] = MappingProxyType({n.id: tokens for n, tokens in by_leaf.items()})
    return SessionsView(MappingProxyType(dict(refs.generations)), refs.incarnation_counter, tuple(refs.closed),
                        MappingProxyType(leaves), MappingProxyType(coverage),
                        MappingProxyType({sid: MappingProxyType(per) for sid, per in sorted(covered.items())}))


def _value_ends(value) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if value is None or value.shape[0] == 0:
        return ((), ())
    if value.shape[0] <= 2 * VALUE_END:
        return (tuple(value.tolist()), ())
    if value.device.type == "cpu":
        value = value.numpy()  # the same memory: two numpy slices cost half what two tensor slices do
    return (tuple(value[:VALUE_END].tolist()), tuple(value[-VALUE_END:].tolist()))


def metrics_view(cache) -> Mapping[str, int]:
    return MappingProxyType(cache.metrics.as_dict(c.name for c in cache.components))


def node_record(cache, node_id: int) -> Optional[NodeRecord]:
    """The record of one live node (None once it left the tree): O(1)."""
    tree = cache.tree
    node = tree.nodes.get(node_id)
    if node is None:
        return None
    root = tree.root
    comps = []
    n = len(cache.components)
    host_slots = len(node.lru_label) > n  # the host tier's LRU slots
    for component in cache.components:
        i = component.index
        cd = node.data[i]
        extras = component.node_extras(node)
        comps.append(ComponentRecord(
            None if cd.value is None else component.value_len(node),
            cd.lock_ref,
            node.lru_label[i],
            tuple(extras.items()) if extras else (),
            _tensor_ends(cd.value),
            None if cd.host_value is None else int(cd.host_value.shape[0]),
            node.lru_label[n + i] if host_slots else None,
            cd.session_ref,
            _session_ids(cd),
        ))
    return NodeRecord(
        node.id, node.parent.id if node.parent is not None else None, node.key, node.namespace,
        node.last_access_time, node.priority if node is not root else 0, node.hit_count, node.in_leaf_set,
        tuple(comps), _key_head(node, root), *evict_fields(cache, node),
    )


def _key_head(node, root) -> Optional[int]:
    """A bigram node's first pair begins with its parent's last token (the root's
    children: with the key's first token, kept in the namespace)."""
    head = namespace_parts(node.namespace).bigram_head
    if head is None or node.parent is root or node.parent is None:
        return head
    return int.from_bytes(node.parent.key[-TOKEN_BYTES:], sys.byteorder)


def evict_fields(cache, node) -> tuple[tuple, str]:
    """An evictable leaf's eviction key and its reason in words; nothing for other nodes."""
    if not node.in_leaf_set:
        return (), ""
    full = cache.components[0]
    note = cache.tree.eviction_policy.describe(node)
    ref = node.data[0].session_ref
    if ref:
        note = f"held by {ref} session{'s' if ref != 1 else ''}; {note}"
    return full.walk_key(node), note


def eviction_order(nodes) -> tuple[int, ...]:
    """Evictable leaves (views or records) in the order Full's walk takes them."""
    return tuple(n.id for n in sorted((n for n in nodes if n.evictable_leaf),
                                      key=lambda n: (n.evict_key, n.last_access_time, n.id)))


def global_record(cache) -> GlobalRecord:
    requests = request_views(cache)
    tree = cache.tree
    relabels = tuple(tree.lru[c.name].relabels if c.name in tree.lru else 0 for c in cache.components)
    if tree.host_policy is not None:  # then the host LRUs', by component index too
        relabels += tuple(tree.host_lru[c.name].relabels if c.name in tree.host_lru else 0 for c in cache.components)
    return GlobalRecord(cache.events.seq, MappingProxyType(pool_views(cache)), requests, relabels,
                        sessions_view(cache), streaming_sessions_view(cache), storage_view(cache), metrics_view(cache))


def take_snapshot(cache) -> CacheSnapshot:
    tree = cache.tree
    root = tree.root
    order = list(tree.iter_nodes())
    ranks: dict[str, dict[int, int]] = {}
    lru: dict[str, tuple[int, ...]] = {}
    by_time = sorted((n for n in order if n is not root), key=lambda n: (-n.last_access_time, n.id))
    lru[FULL] = tuple(n.id for n in by_time)
    for component in cache.components[1:]:
        if component.uses_lru:
            lru[component.name] = tuple(n.id for n in tree.lru[component.name])
    for name, host_lru in getattr(tree, "host_lru", {}).items():  # the host tier's, "<component>_host"
        lru[f"{name}_host"] = tuple(n.id for n in host_lru)
    for name, ids in lru.items():
        ranks[name] = {node_id: rank for rank, node_id in enumerate(ids)}
    paths: dict[int, tuple[int, ...]] = {root.id: ()}
    views = []
    for node in order:
        key = tuple(node.token_ids)
        path = paths[node.parent.id] + key if node.parent is not None else ()
        paths[node.id] = path
        extra_key, salt, head = namespace_parts(node.namespace)
        if head is not None and len(path) > len(key):  # the pair before this node ends the parent's path
            head = path[len(path) - len(key) - 1]
        comps = {}
        for component in cache.components:
            cd = node.data[component.index]
            comps[component.name] = ComponentView(
                None if cd.value is None else component.value_len(node),
                cd.lock_ref,
                ranks.get(component.name, {}).get(node.id),
                MappingProxyType(dict(component.node_extras(node))),
                None if cd.host_value is None else int(cd.host_value.shape[0]),
                cd.session_ref,
                _session_ids(cd),
            )
        views.append(
            NodeView(
                node.id,
                node.parent.id if node.parent is not None else None,
                key,
                path,
                extra_key,
                node.last_access_time,
                node.priority if node is not root else 0,
                node.hit_count,
                node.in_leaf_set,
                tuple(c.id for c in tree.iter_children(node)),
                MappingProxyType(comps),
                salt,
                head,
                *evict_fields(cache, node),
            )
        )
    leaves = eviction_order(views)
    pools = pool_views(cache)
    requests = request_views(cache)
    return CacheSnapshot(
        cache.events.seq,
        cache.page_size,
        tuple(c.name for c in cache.components),
        tuple(views),
        MappingProxyType(lru),
        leaves,
        MappingProxyType(pools),
        requests,
        sessions_view(cache),
        streaming_sessions_view(cache),
        tree.eviction_policy.label(),
        storage_view(cache),
        metrics_view(cache),
    )


_ENDS: dict[int, tuple[weakref.ref, int, tuple]] = {}  # id(tensor) -> (its weak ref, its version, its ends)


def _tensor_ends(value) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``_value_ends``, computed once per tensor while it is unchanged (torch's version
    counter): the flows replace a request's row (torch.cat) and the tree a node's value
    rather than write into them, so a record or snapshot after every step reads an
    unchanged one in O(1) instead of slicing it again (3 µs a value: most of a record)."""
    if value is None:
        return ((), ())
    key = id(value)
    hit = _ENDS.get(key)
    if hit is not None and hit[0]() is value and hit[1] == value._version:
        return hit[2]
    ends = _value_ends(value)
    _ENDS[key] = (weakref.ref(value, lambda _, key=key: _ENDS.pop(key, None)), value._version, ends)
    return ends


def request_views(cache) -> tuple[RequestView, ...]:
    """Every running request, in admission order; each component with request state
    adds its own fields through its ``request_extras`` hook (O(1) per request)."""
    extras = cache.hooks.request_extras
    out = []
    for req in cache.requests.values():
        lock = req.lock
        kv_len = req.kv_len
        finished_len = req.finished_len
        comps = tuple((c.name, tuple(c.request_extras(req).items())) for c in extras)
        out.append(RequestView(
            req.rid, kv_len, req.cache_protected_len, req.last_node, lock is not None,
            len(req.origin_input_ids), finished_len, None if finished_len is None else req.owned_kv_len(),
            req.cache_inserted_len, None if lock is None else lock.node_id, None if lock is None else lock.receipt_id,
            req.priority, kv_len < len(req.origin_input_ids), _tensor_ends(req.kv_indices), comps,
            *_session_of(req),
        ))
    return tuple(out)


def pool_views(cache) -> dict[str, PoolView]:
    """Per pool: total, available, evictable, protected and held by running requests."""
    from ..basics.request import own_slots  # torch: only a live cache gets here, never a stored run's reader

    pool = cache.kv_pool
    held = own_slots(cache.kv_holders())  # on the host: numpy views on the CPU
    views = {
        FULL: PoolView(
            FULL,
            pool.size,
            pool.available_size(),
            cache.tree.evictable[0],
            cache.tree.protected[0],
            _held_pages(held, pool.page_size) * pool.page_size,
        )
    }
    for component in cache.components[1:]:
        views.update(component.pool_views())
    if cache.host is not None:  # the host tier: what the tree keeps there is its "evictable"
        host = cache.host.kv
        views["full_host"] = PoolView("full_host", host.size, host.available_size(), cache.tree.host_held, 0, 0)
        for name, pool in cache.host.aux.items():
            views[f"{name}_host"] = PoolView(f"{name}_host", pool.size, pool.available_size(),
                                             pool.size - pool.available_size(), 0, 0)
    return views


_last_held: tuple = (None, 0, 0)  # (own_slots' array, page size, its distinct pages)


def _held_pages(held, page_size: int) -> int:
    """The distinct pages in ``held``, counted once per array (``own_slots`` hands the
    same read-only one back while no holder changed)."""
    global _last_held
    if _last_held[0] is held and _last_held[1] == page_size:
        return _last_held[2]
    from ..basics.numpy_views import distinct

    count = distinct(held if page_size == 1 else held // page_size)
    _last_held = (held, page_size, count)
    return count


def _session_ids(cd) -> tuple[str, ...]:
    """The sessions whose frontier this node is for one component, sorted (a view's form)."""
    return tuple(sorted(cd.session_ids)) if cd.session_ids else ()


def _session_of(req) -> tuple[Optional[str], bool]:
    if req.session_streaming:
        return req.session, True
    return req.session_id, False


def streaming_sessions_view(cache) -> Optional[StreamingSessionsView]:
    """None while no session is open and no slot is held."""
    sessions, slots = cache.session_controller.sessions, cache.session_slots
    if not sessions and not slots:
        return None
    ctrl = {sid: SessionView(s.streaming, s.inflight, s.close_on_finish, s.req_nodes) for sid, s in sorted(sessions.items())}
    views = {}
    for sid, slot in sorted(slots.items()):
        record = slot.record
        users = tuple(r.rid for r in cache.requests.values() if slot is cache.borrowed_slot(r))
        views[sid] = SlotView(slot.holds_kv, record.cache_protected_len, record.kv_len, record.kv_len,
                              None if slot.lock is None else slot.lock.node_id, slot.publishes_prompt, users)
    return StreamingSessionsView(MappingProxyType(ctrl), MappingProxyType(views))
