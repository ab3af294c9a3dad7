"""An immutable inspection snapshot: the only surface the workbench reads.

Taking one copies plain ints and tuples out of the live tree, so a snapshot stays
valid (and comparable) after the cache moves on; the timeline keeps one per step.
"""

from __future__ import annotations

import dataclasses
import sys
import weakref
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple, Optional

from ..basics.keys import TOKEN_BYTES, namespace_parts

if TYPE_CHECKING:
    from .unified_radix_cache import UnifiedRadixCache


@dataclasses.dataclass(frozen=True)
class ComponentView:
    value_len: Optional[int]  # None: tombstone (data evicted, node kept)
    lock_ref: int
    lru_rank: Optional[int]  # 0 = most recently used; None when not ranked
    extras: Mapping[str, object] = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    host_len: Optional[int] = None  # the host tier's copy (HiCache), when there is one
    session_ref: int = 0  # sessions whose coverage holds this node (session radix cache)
    session_ids: tuple[str, ...] = ()  # sessions whose frontier this node is, sorted

    @property
    def host_only(self) -> bool:
        """Device data evicted, the host copy kept (a load-back can bring it back)."""
        return self.value_len is None and self.host_len is not None

    @property
    def tombstone(self) -> bool:
        return self.value_len is None


@dataclasses.dataclass(frozen=True)
class NodeView:
    id: int
    parent: Optional[int]
    key: tuple[int, ...]
    path: tuple[int, ...]  # every token from the root to the end of this node
    extra_key: Optional[str]
    last_access_time: float
    priority: int
    hit_count: int
    evictable_leaf: bool
    children: tuple[int, ...]
    components: Mapping[str, ComponentView]
    cache_salt: Optional[str] = None  # the second namespace beside extra_key (RadixKey.cache_salt)
    # EAGLE bigram keys: the raw token before ``key`` (shared with the parent's last
    # pair), so the node spans raw tokens (key_head, *key); None without bigram keys
    key_head: Optional[int] = None
    # an evictable leaf's place in Full's eviction order: the walk's sort key (smallest goes
    # first; evict_policy.py) and what decides it in words ("priority 0", "1 hit"); () and "" otherwise
    evict_key: tuple = ()
    evict_note: str = ""

    @property
    def tokens(self) -> int:
        return len(self.key)

    @property
    def raw_key(self) -> tuple[int, ...]:
        """The tokens a user typed for this node: a bigram node's pairs' tokens."""
        return self.key if self.key_head is None else (self.key_head, *self.key)


class PoolView(NamedTuple):  # named tuples: built for every pool and request every step
    name: str
    total: int
    available: int
    evictable: int  # cached in the tree, unlocked
    protected: int  # cached in the tree, locked
    held: int  # owned by running requests (outside the tree)


class RequestView(NamedTuple):
    """A running request as the step left it: plain values, so two steps' views
    compare field by field (the request diff). ``row_ends`` is its req_to_token row
    summarised: the first and last ``VALUE_END`` slots (the whole row when short)."""

    rid: str
    tokens: int  # the committed length (kv_committed_len: the row's length)
    cache_protected_len: int  # the prefix the tree owns (the request holds a lock there)
    last_node: int
    locked: bool
    prompt_len: int = 0
    finished_len: Optional[int] = None  # output tokens through the stop; None: no stop
    owned_len: Optional[int] = None  # what it may cache (owned_kv_len), shown only with a stop
    inserted_len: int = 0  # cache_inserted_len: tokens it already inserted
    lock_node: Optional[int] = None  # the node its lock receipt is anchored to
    lock_receipt: Optional[int] = None  # that receipt's id
    priority: int = 0
    is_chunked: bool = False  # still in chunked prefill: part of the prompt has no KV yet
    row_ends: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
    # per component with request state (its ``request_extras`` hook): (name, ((field, value), ...))
    components: tuple[tuple[str, tuple[tuple[str, object], ...]], ...] = ()
    session: Optional[str] = None  # the session it runs in (a streaming turn's)
    streaming: bool = False  # a streaming turn: last_node is VIRTUAL_NODE while it runs on its slot

    @property
    def own_len(self) -> int:
        """Slots it holds itself (past the prefix): what release frees or caches."""
        return self.tokens - self.cache_protected_len

    def component(self, name: str) -> dict[str, object]:
        """One component's request fields ({} when it keeps none)."""
        return next((dict(fields) for n, fields in self.components if n == name), {})


@dataclasses.dataclass(frozen=True)
class SessionsView:
    """The session radix cache's bookkeeping (None in a snapshot when it is off)."""

    generations: Mapping[str, int]  # open session -> its current generation
    incarnation_counter: int  # the last generation handed out
    closed: tuple[str, ...]  # closed-session tombstones, oldest close first
    leaves: Mapping[str, Mapping[str, tuple[int, ...]]]  # session -> component -> frontier node ids
    # what a frontier covers per component ("path", "window", "node": cache/tree/session_refs.py), and for
    # "window" the tokens each frontier's walk covered (session -> component -> {frontier: tokens}),
    # so a viewer finds the nodes a session holds without the live tree
    coverage: Mapping[str, str] = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    covered_len: Mapping[str, Mapping[str, Mapping[int, int]]] = dataclasses.field(
        default_factory=lambda: MappingProxyType({}))


@dataclasses.dataclass(frozen=True)
class StorageView:
    """The storage tier below the host (None in a snapshot without one)."""

    backend: str  # its backend's name ("memory", "file")
    budget: Optional[int]  # its byte cap (None: none)
    keys: tuple[str, ...]  # the page hashes it holds, sorted
    in_flight: tuple[tuple[int, int, int], ...]  # stores until their ack: (store id, node id, pages), oldest first
    stored_tokens: int  # tokens acknowledged as written so far
    # prefetches in flight: (request id, anchor node id, tokens asked, stage), in issue order
    prefetches: tuple[tuple[str, int, int, str], ...] = ()


def storage_view(cache: UnifiedRadixCache) -> Optional[StorageView]:
    storage = cache.host.storage if cache.host is not None else None
    if storage is None:
        return None
    return StorageView(storage.backend.name, storage.config.budget, tuple(storage.stored_keys()),
                       tuple((s.ack, s.node.id, len(s.keys)) for s in storage.in_flight), storage.stored_tokens,
                       storage.prefetch.view())


def sessions_view(cache: UnifiedRadixCache) -> Optional[SessionsView]:
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


@dataclasses.dataclass(frozen=True)
class CacheSnapshot:
    op_seq: int
    page_size: int
    components: tuple[str, ...]
    nodes: tuple[NodeView, ...]  # depth first, children by (namespace, first page), root first
    lru: Mapping[str, tuple[int, ...]]  # node ids, MRU first (Full: by access time)
    evictable_leaves: tuple[int, ...]  # the order Full would evict them (its eviction policy's)
    pools: Mapping[str, PoolView]
    requests: tuple[RequestView, ...]
    sessions: Optional[SessionsView] = None  # the session radix cache's state (None: off)
    # the scheduler's open sessions and the streaming slots (cache/sessions/streaming.py)
    streaming_sessions: Optional[StreamingSessionsView] = None
    eviction_policy: str = "lru"  # Full's policy, with its non-default arguments (evict_policy.py)
    storage: Optional[StorageView] = None  # the storage tier (None: none)
    metrics: Mapping[str, int] = dataclasses.field(default_factory=dict)  # running totals (metrics.py)

    @property
    def root(self) -> NodeView:
        return self.nodes[0]

    def node(self, node_id: int) -> NodeView:
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise KeyError(f"node {node_id} not in snapshot")

    def non_root(self) -> tuple[NodeView, ...]:
        return self.nodes[1:]

    def tombstones(self, component: str) -> int:
        return sum(1 for n in self.nodes[1:] if n.components[component].tombstone)


class ComponentRecord(NamedTuple):
    """One component's data on one node, as a step left it (a named tuple: the
    timeline makes one per touched node and component every step, and a tuple is
    built several times faster than a frozen dataclass)."""

    value_len: Optional[int]  # None: tombstone
    lock_ref: int
    lru_label: Optional[int]  # place in the component's LRU list (higher = more recent); None: not listed
    extras: tuple[tuple[str, object], ...] = ()
    value_ends: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())  # first and last few slot ids of the value
    host_len: Optional[int] = None  # the host tier's copy, when there is one
    host_lru_label: Optional[int] = None  # place in the component's host LRU (host tier); None: not listed
    session_ref: int = 0  # as ComponentView's
    session_ids: tuple[str, ...] = ()


VALUE_END = 3  # slot ids kept from each end of a value, for inspectors


def _value_ends(value) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if value is None or value.shape[0] == 0:
        return ((), ())
    if value.shape[0] <= 2 * VALUE_END:
        return (tuple(value.tolist()), ())
    if value.device.type == "cpu":
        value = value.numpy()  # the same memory: two numpy slices cost half what two tensor slices do
    return (tuple(value[:VALUE_END].tolist()), tuple(value[-VALUE_END:].tolist()))


class NodeRecord(NamedTuple):
    """One node as a step left it, for stores that keep only what changed: no path,
    no rank (both follow from the other records), and the key is the tree's own
    immutable packed bytes, shared rather than copied. A named tuple, as
    ``ComponentRecord`` is."""

    id: int
    parent: Optional[int]
    key: bytes
    namespace: object  # the node's: extra_key, or keys.Namespace (cache_salt, bigram head)
    last_access_time: float
    priority: int
    hit_count: int
    evictable_leaf: bool
    components: tuple[ComponentRecord, ...]
    key_head: Optional[int] = None  # bigram keys: the raw token before ``key`` (NodeView.key_head)
    evict_key: tuple = ()  # as NodeView's
    evict_note: str = ""

    @property
    def extra_key(self) -> Optional[str]:
        return namespace_parts(self.namespace).extra_key

    @property
    def cache_salt(self) -> Optional[str]:
        return namespace_parts(self.namespace).cache_salt


@dataclasses.dataclass(frozen=True, slots=True)
class GlobalRecord:
    """Everything in a snapshot that is not a node: small, taken whole every step."""

    op_seq: int
    pools: Mapping[str, PoolView]
    requests: tuple[RequestView, ...]
    lru_relabels: tuple[int, ...]  # per component list (then per host LRU): when one moves, every label in it moved
    sessions: Optional[SessionsView] = None  # as CacheSnapshot's: a state rebuilt from records keeps them
    streaming_sessions: Optional[StreamingSessionsView] = None
    storage: Optional[StorageView] = None
    metrics: Mapping[str, int] = dataclasses.field(default_factory=dict)  # as CacheSnapshot's


def metrics_view(cache: UnifiedRadixCache) -> Mapping[str, int]:
    return MappingProxyType(cache.metrics.as_dict(c.name for c in cache.components))


def node_record(cache: UnifiedRadixCache, node_id: int) -> Optional[NodeRecord]:
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


def evict_fields(cache: UnifiedRadixCache, node) -> tuple[tuple, str]:
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


def global_record(cache: UnifiedRadixCache) -> GlobalRecord:
    requests = request_views(cache)
    tree = cache.tree
    relabels = tuple(tree.lru[c.name].relabels if c.name in tree.lru else 0 for c in cache.components)
    if tree.host_policy is not None:  # then the host LRUs', by component index too
        relabels += tuple(tree.host_lru[c.name].relabels if c.name in tree.host_lru else 0 for c in cache.components)
    return GlobalRecord(cache.events.seq, MappingProxyType(pool_views(cache)), requests, relabels,
                        sessions_view(cache), streaming_sessions_view(cache), storage_view(cache), metrics_view(cache))


def take_snapshot(cache: UnifiedRadixCache) -> CacheSnapshot:
    tree = cache.tree
    root = tree.root
    order = list(tree.iter_nodes())
    ranks: dict[str, dict[int, int]] = {}
    lru: dict[str, tuple[int, ...]] = {}
    by_time = sorted((n for n in order if n is not root), key=lambda n: (-n.last_access_time, n.id))
    lru["full"] = tuple(n.id for n in by_time)
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


def request_views(cache: UnifiedRadixCache) -> tuple[RequestView, ...]:
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


def pool_views(cache: UnifiedRadixCache) -> dict[str, PoolView]:
    """Per pool: total, available, evictable, protected and held by running requests."""
    from ..basics.numpy_views import distinct  # torch: only a live cache gets here, never a stored run's reader
    from ..basics.request import own_slots

    pool = cache.kv_pool
    held = own_slots(cache.kv_holders())  # on the host: numpy views on the CPU
    views = {
        "full": PoolView(
            "full",
            pool.size,
            pool.available_size(),
            cache.tree.evictable[0],
            cache.tree.protected[0],
            distinct(held if pool.page_size == 1 else held // pool.page_size) * pool.page_size,
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


def _session_ids(cd) -> tuple[str, ...]:
    """The sessions whose frontier this node is for one component, sorted (a view's form)."""
    return tuple(sorted(cd.session_ids)) if cd.session_ids else ()


def _session_of(req) -> tuple[Optional[str], bool]:
    if req.session_streaming:
        return req.session, True
    return req.session_id, False


@dataclasses.dataclass(frozen=True)
class SessionView:
    streaming: bool
    inflight: bool  # a streaming turn was created and has not finished or aborted
    close_on_finish: bool  # a close waits for the running turn
    req_nodes: int  # 1 once a streaming turn finished (the session's rollback point)


@dataclasses.dataclass(frozen=True)
class SlotView:
    holds_kv: bool
    cache_protected_len: int  # the tree owns [0, here) of the record; the slot's lock ends there
    kv_committed_len: int
    kv_allocated_len: int
    lock_node: Optional[int]  # the node the slot's lock sits on (None while a checkpoint moves it)
    publishes_prompt: bool  # the first turn still runs: its checkpoints publish its prompt
    borrowed_by: tuple[str, ...]  # the running turns on its record (more than one: SGLang's suspected bug)


@dataclasses.dataclass(frozen=True)
class StreamingSessionsView:
    controller: Mapping[str, SessionView]
    slots: Mapping[str, SlotView]


def streaming_sessions_view(cache: UnifiedRadixCache) -> Optional[StreamingSessionsView]:
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
