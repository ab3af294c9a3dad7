"""A minimal request: just enough state for the request-level cache calls.

``kv_indices`` is the request's req_to_token row: the slot of every token computed so
far. Its first ``cache_protected_len`` slots belong to the tree (the request holds a
lock there); the rest are the request's own.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any, ClassVar, Optional

import numpy as np
import torch

from .params import IncLockRefResult
from .numpy_views import host_tails


@dataclasses.dataclass(eq=False)
class Req:
    rid: str
    origin_input_ids: list[int]
    kv_indices: torch.Tensor
    last_node: int
    lock: Optional[IncLockRefResult]
    cache_protected_len: int = 0
    cache_inserted_len: int = 0  # tokens this request already inserted (hit counting)
    output_ids: list[int] = dataclasses.field(default_factory=list)
    extra_key: Optional[str] = None
    cache_salt: Optional[str] = None  # a second namespace beside extra_key (None: unsalted)
    priority: int = 0
    swa_evicted_seqlen: int = 0  # positions below hold no live SWA slot of this request
    # the match found Full KV past its last live window: the first checkpoint stops here
    swa_branching_seqlen: Optional[int] = None
    mamba_pool_idx: Optional[torch.Tensor] = None  # the request's running state slot
    mamba_ping_pong: Optional[torch.Tensor] = None  # two tracked-checkpoint slots (page > 1)
    mamba_next_track_idx: int = 0
    mamba_last_track_seqlen: Optional[int] = None  # where the newest tracked state was taken
    mamba_prev_track_seqlen: Optional[int] = None
    mamba_keep_idx: Optional[int] = None  # the ping-pong slot a finished request hands to the tree
    mamba_cow_src: Optional[torch.Tensor] = None  # the tree slot its running state was copied from
    released: bool = False
    host_loaded_length: int = 0  # prefix tokens its admission loaded back from the host tier
    # a retracted request's host backup (request_retraction.py's RetractionBackup; None: none)
    retraction_backup: Optional[Any] = None
    # output tokens through the stop (SGLang's finished_len): a stop before the last
    # committed token leaves KV past it that nothing can match (freed on release)
    finished_len: Optional[int] = None
    # fill_ids packed as a key's bytes, grown with each decode: caching never re-packs
    token_bytes: bytearray = dataclasses.field(default_factory=bytearray)
    # the session radix cache: the session this request belongs to, the generation it was
    # admitted under (a finish under an older one registers nothing), and SGLang's
    # FINISH_ABORT (an aborted request never tags its KV for the session)
    session_id: Optional[str] = None
    session_generation: Optional[int] = None
    finish_aborted: bool = False
    session_streaming: ClassVar[bool] = False  # a streaming session's turn registers no session ref
    # per component name: that component's own state for this request (a new component
    # keeps it here rather than adding fields; SWA and Mamba predate it)
    component_state: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def fill_ids(self) -> list[int]:
        return self.origin_input_ids + self.output_ids

    @property
    def prefix_indices(self) -> torch.Tensor:
        """Slots owned by the tree at the front of the row."""
        return self.kv_indices[: self.cache_protected_len]

    @property
    def kv_len(self) -> int:
        return int(self.kv_indices.shape[0])

    kv_committed_len = kv_len  # SGLang's name: tokens whose KV is computed and written

    @property
    def is_chunked(self) -> bool:
        """Still in chunked prefill: part of the prompt has no KV yet."""
        return self.kv_len < len(self.origin_input_ids)

    def owned_kv_len(self) -> int:
        """What the request may cache: its committed KV, cut at the stop (SGLang's
        owned_kv_len)."""
        if self.finished_len is None:
            return self.kv_len
        return min(self.kv_len, len(self.origin_input_ids) + self.finished_len)

    @property
    def own_indices(self) -> torch.Tensor:
        """Slots this request holds itself (freed when it finishes)."""
        return self.kv_indices[self.cache_protected_len :]


_last_join: tuple = ((), (), (), None)  # the last own_slots answer: (tensors, versions, starts, joined)


def own_slots(holders) -> np.ndarray:
    """Every holder's ``own_indices`` joined, on the host (the pool views and checks
    read them every step; numpy views on the CPU). Read-only: it may be the last
    call's, made from the same tensors (held there, so no other can take their
    identity), unchanged (torch's version counters) and cut at the same starts; the
    pool views, SWA's and the checks ask several times a step, mostly of holders no
    step changed."""
    global _last_join
    holders = list(holders)
    tensors = tuple(r.kv_indices for r in holders)
    starts = tuple(r.cache_protected_len for r in holders)
    versions = tuple(t._version for t in tensors)
    last_tensors, last_versions, last_starts, joined = _last_join
    if (joined is not None and starts == last_starts and versions == last_versions
            and len(tensors) == len(last_tensors) and all(map(operator.is_, tensors, last_tensors))):
        return joined
    joined = host_tails(list(tensors), list(starts))
    joined.flags.writeable = False
    _last_join = (tensors, versions, starts, joined)
    return joined
