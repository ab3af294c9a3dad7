"""Parameter, result and receipt records, named as in SGLang's base_prefix_cache.

Node references that leave the tree core are integer node ids (SGLang's ``NodeId``),
so callers can never hold a node object that the tree has since deleted.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional

import torch

from .evict_fields import params_field, params_fields
from .keys import RadixKey

NodeId = int


@dataclasses.dataclass
class MatchPrefixParams:
    key: RadixKey
    cow_mamba: bool = False
    req: object = None  # the request receiving a Mamba copy-on-write, when cow_mamba


class MatchResult(NamedTuple):
    """What a prefix match found; without a host tier the three node ids coincide."""

    device_indices: torch.Tensor
    last_device_node: NodeId
    last_host_node: NodeId
    best_match_node: NodeId
    host_hit_length: int = 0
    swa_host_hit_length: int = 0
    swa_branching_seqlen: Optional[int] = None
    mamba_host_hit_length: int = 0
    mamba_branching_seqlen: Optional[int] = None
    cache_protected_len: Optional[int] = None
    full_kv_hit_length: int = 0
    last_visited_node_id: Optional[NodeId] = None

    @property
    def device_prefix_len(self) -> int:
        return int(self.device_indices.shape[0])

    @property
    def prefix_len(self) -> int:
        return int(self.device_indices.shape[0])


_MATCH_FIELD_AT = {name: k for k, name in enumerate(MatchResult._fields)}
_new_tuple = tuple.__new__


def tree_match_result(indices: torch.Tensor, device_node: NodeId, best_node: NodeId, host_hit: int,
                      walked: int, last_visited: Optional[NodeId], device_len: int = 0,
                      branch_grids: tuple[tuple[int, int], ...] = ()) -> MatchResult:
    """The tree's MatchResult, built by position: every match makes one, and the named
    tuple's keyword constructor cost a microsecond of a cold match. ``branch_grids``:
    (field position, grid) for each component's branching field (``branching_field``):
    the ``walked`` tokens rounded down to the grid, set where that passes the device
    prefix (``device_len`` tokens, the length of ``indices``) and the host hit (else the
    field stays None). Filled here, in the one tuple, because a finalizer per component
    rebuilding it cost ~2 µs each."""
    fields = [indices, device_node, best_node, best_node, host_hit, 0, None, 0, None, None, walked, last_visited]
    if branch_grids:
        boundary = device_len + host_hit
        for at, grid in branch_grids:
            aligned = walked - walked % grid
            if aligned > boundary:
                fields[at] = aligned
    return _new_tuple(MatchResult, fields)


def match_field_position(name: str) -> int:
    """Where MatchResult keeps the field ``name`` (KeyError for a name it lacks)."""
    return _MATCH_FIELD_AT[name]


def with_match_field(result: MatchResult, name: str, value) -> MatchResult:
    """``result._replace(name=value)`` for one field, rebuilt by position: a component's
    match finalizer runs on every match, where ``_replace`` (a dict of every field) cost
    three times as much."""
    k = _MATCH_FIELD_AT[name]
    return _new_tuple(MatchResult, (*result[:k], value, *result[k + 1:]))


@dataclasses.dataclass
class InsertParams:
    key: RadixKey
    value: Optional[torch.Tensor] = None
    mamba_value: Optional[torch.Tensor] = None
    # Tokens at the front of the key the caller already uses from the tree itself:
    # their incoming slots are not duplicates and must not be freed.
    prev_prefix_len: int = 0
    # Positions below this no longer hold live SWA slots of the inserting request.
    swa_evicted_seqlen: int = 0
    priority: int = 0
    # Set when the insert stops at an SWA branch point (see SWAComponent.prepare_for_caching_req).
    swa_branching_seqlen: Optional[int] = None
    # The inserting request already inserted [0, here): only nodes ending past it
    # count a hit, so a request counts each node once across its checkpoints.
    inserted_len: int = 0
    session_id: Optional[str] = None  # the inserting request's session: KV events attribute new blocks to it


@dataclasses.dataclass
class InsertResult:
    prefix_len: int
    last_device_node: Optional[NodeId] = None
    mamba_exist: bool = False
    total_len: int = 0
    swa_branch_inserted: bool = False


@dataclasses.dataclass
class EvictParams:
    num_tokens: int = 0
    swa_num_tokens: int = 0
    mamba_num: int = 0
    # units to evict of a component without a field above, by component name
    by_component: dict[str, int] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, amounts: dict[str, int]) -> EvictParams:
        """Units to evict per component name, into the named fields where there is one."""
        return cls(**params_fields(amounts),
                   by_component={k: v for k, v in amounts.items() if not params_field(k)})

    def request_for(self, component: str) -> int:
        field = params_field(component)
        return getattr(self, field) if field else self.by_component.get(component, 0)


@dataclasses.dataclass
class EvictResult:
    num_tokens_evicted: int = 0
    swa_num_tokens_evicted: int = 0
    mamba_num_evicted: int = 0
    # units evicted per component name, every component (the fields above included)
    by_component: dict[str, int] = dataclasses.field(default_factory=dict)


class IncLockRefResult:
    """The receipt of one ``inc_lock_ref``: anchored to its node, released exactly once.

    ``component_lock_uuids`` records, per component, the boundary a segment lock
    stopped at (None: it reached the root), so the release undoes exactly the acquire.
    A plain class with slots: one is built per lock, on the hot path.
    """

    __slots__ = ("delta", "node_id", "receipt_id", "skipped_lock_components", "component_lock_uuids", "swa_released")

    def __init__(
        self,
        delta: int = 0,
        node_id: Optional[NodeId] = None,
        receipt_id: int = 0,
        skipped_lock_components: tuple[str, ...] = (),
        component_lock_uuids: Optional[dict[str, Optional[int]]] = None,
    ) -> None:
        self.delta = delta
        self.node_id = node_id
        self.receipt_id = receipt_id
        self.skipped_lock_components = skipped_lock_components
        self.component_lock_uuids = component_lock_uuids if component_lock_uuids is not None else {}
        self.swa_released = False  # the SWA window part was released early

    def to_dec_params(self) -> DecLockRefParams:
        return DecLockRefParams(
            node_id=self.node_id,
            receipt_id=self.receipt_id,
            skipped_lock_components=self.skipped_lock_components,
            component_lock_uuids=dict(self.component_lock_uuids),
            swa_released=self.swa_released,
        )

    def __repr__(self) -> str:
        return (
            f"IncLockRefResult(delta={self.delta}, node_id={self.node_id}, receipt_id={self.receipt_id}, "
            f"skipped={self.skipped_lock_components}, uuids={self.component_lock_uuids})"
        )


@dataclasses.dataclass
class DecLockRefParams:
    node_id: Optional[NodeId] = None
    receipt_id: int = 0
    skipped_lock_components: tuple[str, ...] = ()
    component_lock_uuids: dict[str, Optional[int]] = dataclasses.field(default_factory=dict)
    # set once the SWA window part was released early (release_window)
    swa_released: bool = False


@dataclasses.dataclass
class DecLockRefResult:
    delta: int = 0
