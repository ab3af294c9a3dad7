"""Decode retraction, restore and abort: what SGLang 0.5.23's scheduler does to a
request it pauses or drops, as calls on the cache.

* ``retract`` (``release_req``, schedule_batch.py): optionally back the row up to the
  host (``backup_kv_cache``, PD decode with the ``host_pool`` backend), give the row
  back without caching it (``release_kv_cache(checkpoint=False)``), evict the
  shortfall below what the remaining requests need (``evict_from_tree_cache``), then
  ``reset_for_retract``. The request is no longer running but stays known.
* ``restore`` (disaggregation/decode.py ``_pre_alloc`` + ``restore_kv_cache``): fresh
  row and slots, the backup copied host -> device, the backup freed.
* ``abort`` (scheduler.py): running -> released with its KV cached (0.5.23 inserts
  aborted KV); in chunked prefill -> ``release_aborted_request`` then released
  uncached; retracted -> its backup discarded.

SGLang's ``seqlen`` counts the token sampled last, whose KV the next forward writes:
at a decode retraction it is the row's length plus one, so its backup of
``[0, seqlen - 1)`` is exactly our row (and ``seqlen <= 1`` cannot arise here).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Optional

import torch

from ..basics.base_component import FULL
from ..basics.errors import CacheError
from ..observe.events import Cause, EventKind
from ..basics.keys import ceil_align
from ..basics.params import EvictParams
from ..basics.request import Req
from ..sessions.streaming import refuse_if_streaming

if TYPE_CHECKING:
    from ..tiers.host import HostTier
    from .flows import RequestFlows as _Flows  # the flows it extends, and through them RequestOwner
else:
    _Flows = object


@dataclasses.dataclass
class RetractionBackup:
    """A retracted request's KV on the host (SGLang's ``RetractionBackup``): the row's
    Full KV page-padded, and the window (positions ``[swa_start, length)``) of the
    component that keeps one (``keeps_retraction_window``: SWA), in that component's
    host pool."""

    length: int  # tokens backed up: the row's length at retraction
    host_indices: torch.Tensor  # Full host slots, page-padded
    swa_start: int = 0
    swa_host_indices: Optional[torch.Tensor] = None  # the window's host slots, page-padded
    window_component: Optional[str] = None  # whose host pool holds them

    def host_parts(self) -> list[tuple[str, torch.Tensor]]:
        """(host pool, its slots) for each part it holds."""
        out = [(FULL, self.host_indices)]
        if self.swa_host_indices is not None:
            out.append((self.window_component, self.swa_host_indices))
        return out

    def host_slots(self) -> dict[str, int]:
        """Host slots it holds, per host pool."""
        return {name: int(slots.shape[0]) for name, slots in self.host_parts()}


class RequestRetraction(_Flows):
    """Mixin of ``UnifiedRadixCache``: retract, restore and abort a request."""

    retracted: dict[str, Req]  # rid -> retracted request (with or without a backup)

    # ---- retract ----------------------------------------------------------------------
    def retract(self, req: Req, backup: bool = False, evict: int = 0) -> bool:
        """Retract a running request; returns False when its backup did not fit on the
        host (SGLang then aborts it: the request is gone, its KV freed)."""
        self._check_live(req)
        refuse_if_streaming(req, "retract")
        if type(evict) is not int or evict < 0:
            raise CacheError(f"retract: evict must be a non-negative int (got {evict!r})")
        if req.is_chunked:
            raise CacheError(f"retract: request {req.rid!r} is still in chunked prefill (decode retraction "
                             "takes only requests in the decode batch)")
        window = None
        if backup:
            self._check_backup_possible("retract")
            window = self._backup_window(req)  # refused here when the window has a hole
        with self.events.op("retract", request=req.rid):
            saved = self._backup_kv_cache(req, window) if backup else None
            self.release_kv_cache(req, checkpoint=False)
            # evict_from_tree_cache: each KV pool's own shortfall below ``evict`` (SWA's too)
            shorts = {FULL: max(0, evict - self.kv_pool.available_size())}
            for component in self.hooks.kv_peers:
                shorts[component.name] = max(0, evict - component.available_size())
            if any(shorts.values()):
                self.evict_for_alloc(EvictParams.of(shorts))
            self._reset_for_retract(req)
            if backup and saved is None:  # SGLang aborts a request it could not back up
                return False
            req.retraction_backup = saved
            self.retracted[req.rid] = req
            return True

    def _check_backup_possible(self, call: str) -> None:
        """SGLang's supports_retraction_backup: a host tier, and no component that
        refuses a backup (Mamba)."""
        if self.host is None:
            raise CacheError(f"{call}: a backup needs the host tier (config hicache)")
        if any(c.refuses_retraction_backup for c in self.components):
            raise CacheError(f"{call}: SGLang 0.5.23 backs up no request with Mamba state (supports_retraction_backup)")

    def _window_keeper(self):
        """The component whose trailing window a backup keeps (SWA), or None."""
        return next((c for c in self.components if c.keeps_retraction_window), None)

    def _backup_window(self, req: Req) -> Optional[tuple[int, torch.Tensor]]:
        """The SWA window's start and its SWA slots (None without SWA); refused when a
        window position has no SWA slot (SGLang asserts the same)."""
        swa = self._window_keeper()
        if swa is None:
            return None
        n, ps = req.kv_len, self.page_size
        start = max(0, n - swa.window) // ps * ps
        slots = swa.pool.translate(req.kv_indices[start:n])
        if bool((slots < 0).any()):
            raise CacheError(f"retract: request {req.rid!r} has window positions without SWA slots "
                             "(SGLang asserts: unmapped SWA window positions)")
        return start, slots

    def _backup_kv_cache(self, req: Req, window) -> Optional[RetractionBackup]:
        """Host slots for the row (and SWA window), page-padded, each pool reclaiming its
        whole need from host copies once when short; the copy; None when it cannot fit."""
        host: HostTier = self.host
        device = _padded(req.kv_indices, self.page_size)
        full_host = self._take_retraction_slots(host, FULL, int(device.shape[0]))
        if full_host is None:
            return None
        saved = RetractionBackup(req.kv_len, full_host)
        if window is not None:
            start, swa_slots = window
            swa = self._window_keeper()
            swa_device = _padded(swa_slots, self.page_size)
            swa_host = self._take_retraction_slots(host, swa.name, int(swa_device.shape[0]))
            if swa_host is None:
                host.kv.free(full_host)
                self._emit_host(EventKind.FREE, FULL, int(full_host.shape[0]), f"{req.rid}: backup refused")
                return None
            host.aux[swa.name].copy_in(swa.device_store, swa_device, swa_host)
            saved.swa_start, saved.swa_host_indices, saved.window_component = start, swa_host, swa.name
        host.kv.copy_in(self.kv_buffer, device, full_host)
        if self.events.enabled:
            self.events.emit(EventKind.BACKUP, FULL, None, Cause.RETRACT, req.kv_len,
                             f"{req.rid}: row backed up (device -> host)")
        return saved

    def _take_retraction_slots(self, host: HostTier, name: str, need: int) -> Optional[torch.Tensor]:
        pool = host.pool(name)
        if pool.available_size() < need:
            host.evict_host(need, name)  # SGLang's reclaim asks for the whole need
            if pool.available_size() < need:
                return None
        slots = pool.allocator.alloc(need)
        self._emit_host(EventKind.ALLOC, name, need, "retraction backup")
        return slots

    def _emit_host(self, kind: EventKind, name: str, n: int, detail: str) -> None:
        if self.events.enabled and n:
            self.events.emit(kind, name, None, Cause.RETRACT, n, f"pool={name}_host, {detail}")

    def _reset_for_retract(self, req: Req) -> None:
        """SGLang's reset_for_retract: the request's cache bookkeeping back to zero."""
        req.cache_protected_len = req.cache_inserted_len = 0
        req.last_node, req.lock = self.tree.root.id, None
        req.swa_branching_seqlen, req.swa_evicted_seqlen = None, 0
        req.mamba_pool_idx = req.mamba_ping_pong = req.mamba_cow_src = None
        req.mamba_next_track_idx, req.mamba_keep_idx = 0, None
        req.mamba_last_track_seqlen = req.mamba_prev_track_seqlen = None
        req.kv_indices = self.tree._empty

    # ---- restore ----------------------------------------------------------------------
    def restore(self, req: Req) -> None:
        """A retracted request with a backup runs again: fresh slots for its row, its KV
        copied back from the host, the backup freed. Refused (nothing changes) without
        a backup or when the backup does not fit the request's length."""
        saved = self._retracted(req, "restore").retraction_backup
        if saved is None:
            raise CacheError(f"restore: request {req.rid!r} was retracted without a backup (it re-enters by prefill)")
        n = len(req.fill_ids)
        if saved.length != n or saved.host_indices.shape[0] != ceil_align(n, self.page_size):
            raise CacheError(f"restore: the backup of {req.rid!r} has {saved.host_indices.shape[0]} host slots, "
                             f"its row needs {ceil_align(n, self.page_size)} (SGLang asserts the sizes match)")
        with self.events.op("restore", request=req.rid):
            slots = self.alloc_kv(n)  # refused before any change when eviction cannot cover it
            host: HostTier = self.host
            device = _padded(slots, self.page_size)
            host.kv.load(self.kv_buffer, saved.host_indices, device)
            swa = self._window_keeper()
            if swa is not None and saved.swa_host_indices is not None:
                start = saved.swa_start
                # below the window SGLang leaves whatever the fresh slots held (nothing
                # reads it); ours writes it so every SWA slot verifies
                self.write_kv_peers(slots[:start], req.fill_ids[:start])
                swa_device = _padded(swa.pool.translate(slots[start:]), self.page_size)
                host.aux[swa.name].load(swa.device_store, saved.swa_host_indices, swa_device)
            if self.events.enabled:
                self.events.emit(EventKind.LOAD, FULL, None, Cause.RETRACT, n, f"{req.rid}: row restored (host -> device)")
            self._discard_backup(req)
            req.kv_indices = slots
            req.released = False
            del self.retracted[req.rid]
            self.requests[req.rid] = req

    def write_kv_peers(self, slots: torch.Tensor, tokens: list[int]) -> None:
        """Write only the peer pools' KV (SWA) for ``tokens`` into ``slots``."""
        if not self.fingerprints or not tokens:
            return
        from ..pools import prefix_fingerprints

        fps = prefix_fingerprints(tokens, self.device)
        for component in self.hooks.kv_peers:
            component.peer_write(slots, fps)

    def _retracted(self, req: Req, call: str) -> Req:
        if self.retracted.get(req.rid) is not req:
            raise CacheError(f"{call}: request {req.rid!r} is not retracted")
        return req

    def _discard_backup(self, req: Req) -> None:
        """SGLang's discard_kv_cache_backup: the backup's host slots go back."""
        saved = req.retraction_backup
        if saved is None:
            return
        host: HostTier = self.host
        for name, slots in saved.host_parts():
            host.pool(name).free(slots)
            self._emit_host(EventKind.FREE, name, int(slots.shape[0]), f"{req.rid}: backup freed")
        req.retraction_backup = None

    # ---- abort ------------------------------------------------------------------------
    def abort(self, req: Req) -> str:
        """Abort a request wherever it is; returns where it was ("running", "chunked",
        "retracted"). Running: released with its KV cached (0.5.23 inserts aborted KV);
        chunked: released uncached after release_aborted_request (nothing of it is
        pending here); retracted: its backup discarded. It finishes as FINISH_ABORT
        (``finish_aborted``), so the session radix cache registers nothing for it."""
        if self.retracted.get(req.rid) is req:
            with self.events.op("abort", request=req.rid):
                self._discard_backup(req)
                del self.retracted[req.rid]
            return "retracted"
        self._check_live(req)
        chunked = req.is_chunked
        req.finish_aborted = True  # FINISH_ABORT: its cached KV is never tagged for its session
        with self.events.op("abort", request=req.rid):
            self.release_kv_cache(req, checkpoint=not chunked)
        return "chunked" if chunked else "running"

    def backup_held(self) -> dict[str, int]:
        """Host slots the retracted requests' backups hold, per host pool."""
        out: dict[str, int] = {}
        for req in self.retracted.values():
            if req.retraction_backup is not None:
                for name, n in req.retraction_backup.host_slots().items():
                    out[name] = out.get(name, 0) + n
        return out


def _padded(indices: torch.Tensor, page: int) -> torch.Tensor:
    """SGLang's _pad_retraction_indices: the last page's remaining slots appended."""
    n = int(indices.shape[0])
    extra = ceil_align(n, page) - n
    if not extra:
        return indices
    tail = indices[-1] + torch.arange(1, extra + 1, dtype=torch.int64, device=indices.device)
    return torch.cat([indices, tail])
