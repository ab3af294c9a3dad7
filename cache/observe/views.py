"""The inspection snapshot's records: immutable views of nodes, pools, requests,
sessions and the storage tier, made of plain ints and tuples so a snapshot stays
valid (and comparable) after the cache moves on. The controller takes them
(``controller/snapshot.py``); the workbench reads only these."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple, Optional

from ..basics.keys import namespace_parts



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
