"""Admission with load-back: a request whose prefix is partly on the host tier.

SGLang 0.5.23's scheduler matches a waiting request (copy-on-write of a device Mamba
state into the request's own slot), and its PrefillAdder, when the match found data on
the host (Full host-only down to the best match, or a host hit of Full, SWA or Mamba),
calls ``init_load_back`` → ``load_back(best, mem_quota, req)`` (tiers/host.py,
``HostTier.load_back_at``). The caller then takes the request's prefix as the loaded
one: it anchors at the node the load returned, adds the loaded tokens to the prefix,
protects them, locks, and allocates the rest (schedule_policy.py, _commit_prefill_admission
and alloc_for_extend).

A load called off (threshold, ``mem_quota``, or no room even after eviction) leaves
the request to compute its whole non-device part; the slot prepared for it is gone
again (sgl-project/sglang#30986). Unlike ``new_request``, nothing is checked before
the match: what the load changed stays when a later allocation refuses the request,
as SGLang's admission keeps a load it has queued.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from ..basics.errors import CacheError
from ..basics.keys import RadixKey
from ..basics.params import MatchPrefixParams

if TYPE_CHECKING:
    from ..basics.request import Req
    from .flows import RequestFlows as _Flows  # the flows it extends, and through them RequestOwner
else:
    _Flows = object


class RequestLoadBack(_Flows):
    """``new_request(..., load_back=True)``: mixed into UnifiedRadixCache beside
    RequestFlows, whose ``new_request`` hands over to ``_admit_loading_back``."""

    def _admit_loading_back(self, req: Req, key: RadixKey, mem_quota: Optional[int], chunk: Optional[int] = None) -> None:
        """Match, load what the host holds of the prefix, then lock it and allocate
        the rest; ``req.host_loaded_length`` tells what the load brought."""
        host = self.require_host("new_request with load_back")
        if mem_quota is not None and (type(mem_quota) is not int or mem_quota < 0):
            raise CacheError(f"new_request: mem_quota must be a non-negative int (got {mem_quota!r})")
        match = self.match_prefix(MatchPrefixParams(key, cow_mamba=True, req=req))
        try:
            result = host.load_back_at(match, mem_quota, req)  # a call-off (no room either) returns 0
            loaded, anchor = result.loaded, result.last_device_node
            if loaded == 0:  # init_load_back: nothing new on the Full path keeps the old anchor
                anchor = match.last_device_node
            prefix = self.tree.path_device_indices(anchor) if loaded else match.device_indices
            assert prefix.shape[0] == match.prefix_len + loaded, "the load and the prefix disagree"
            req.host_loaded_length = loaded
            self._admit_at(req, anchor, prefix, match.swa_branching_seqlen, chunk)
        except BaseException:
            for component in self.hooks.release_request:  # the COW or the loaded state slot
                component.release_request(req)
            raise
        finally:  # v0.5.23 acks the load at the next poll, after the admission's own eviction
            host.end_of_op()
            host.drain()

    def _admit_at(self, req: Req, anchor: int, prefix: torch.Tensor, swa_branching_seqlen, chunk=None) -> None:
        """Lock the prefix ending on ``anchor``, check the KV for the rest of the prompt
        fits, take the request's own slots and that KV, and write it (the scheduler's
        order: lock, budget the KV, then alloc_for_extend: the row's states, the KV). A
        prompt that cannot fit is refused before a state is evicted for it."""
        hooks, prefix_len = self.hooks, int(prefix.shape[0])
        lock = fresh = None
        try:
            lock = self.tree.inc_lock_ref(anchor)
            self.check_capacity(need := self._first_chunk(req, prefix_len, chunk))
            for component in hooks.reserve_request:
                component.reserve_request(req)
            fresh = self.alloc_kv(need)
            self.write_kv(fresh, req.origin_input_ids[: prefix_len + fresh.shape[0]], prefix_len)
            req.kv_indices = torch.cat([prefix, fresh]) if prefix_len else fresh
            for component in hooks.admit_request:
                component.admit_request(req, prefix_len)
        except BaseException:
            if lock is not None:
                self.tree.dec_lock_ref(anchor, lock)
            if fresh is not None and fresh.shape[0]:
                self.free_kv([fresh])
            req.kv_indices = self.tree._empty
            raise
        req.last_node, req.lock, req.cache_protected_len = anchor, lock, prefix_len
        req.swa_branching_seqlen = swa_branching_seqlen
