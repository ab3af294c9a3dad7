"""The trailing-window pools of the storage tier: SWA and Mamba beside Full KV (SGLang
0.5.23's hybrid storage path, hit policy TRAILING_PAGES).

Full KV is stored page by page along the whole hash chain; SWA and Mamba data only
where a node's host copy ended: a node's host SWA under its last page hashes
(``<hash>.swa``), its state under its last hash (``<hash>.mamba``). So storage can hold
a prefix's KV and the state only at some of its page boundaries. A prefetch with such
pools therefore asks for the longest prefix whose KV is stored and where each pool holds
its trailing pages (``batch_exists_v2``); it stages host slots for each pool next to the
KV slots (all pools or none); it reads those pools only once all the KV came back; and
it keeps what it read only if every pool read everything it asked. A window or a state
cannot be cut page by page, so a shortfall anywhere discards the whole prefetch. The
completion hands each pool's slots to its component (``commit_prefetch``), which places
them on the fetched path's tail.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Optional

import torch

if TYPE_CHECKING:
    from .backends import StorageBackend
    from .owner import HostSide
    from ..tree.node import TreeNode


def storage_key(page_hash: str, pool: str) -> str:
    """A trailing pool's page key, as SGLang's backends file it."""
    return f"{page_hash}.{pool}"


@dataclasses.dataclass(eq=False)
class Staging:
    """One trailing pool of a prefetch."""

    component: object  # the component (its host part declares the storage hooks)
    pages: int  # trailing pages the hit must hold (v0.5.23's prepare_prefetch)
    keys: Optional[list[str]] = None  # its page hashes, once all the KV was read
    slots: Optional[torch.Tensor] = None  # its host slots, once the hit took them
    read: int = 0  # leading keys read back

    @property
    def name(self) -> str:
        return self.component.name

    @property
    def unit(self) -> int:
        """Host slots per stored page (SWA: a page of tokens; Mamba: one state)."""
        return self.component.page_size if self.component.host_paged else 1

    @property
    def complete(self) -> bool:
        return self.keys is not None and self.read == len(self.keys)


def plan(host: HostSide, anchor: TreeNode, span_pages: int) -> list[Staging]:
    """The pools a prefetch of ``span_pages`` pages after ``anchor`` stages."""
    out = []
    for component in host.cache.tree.host_components:
        pages = component.prefetch_trailing_pages(anchor, span_pages) if component.storage_pool else 0
        if pages:
            out.append(Staging(component, pages))
    return out


def restorable_pages(backend: StorageBackend, hashes: list[str], stagings: list[Staging]) -> int:
    """The longest prefix, in pages, with all its KV stored and every pool's trailing
    pages stored where it ends (a pool's pages before the span's start are not asked)."""
    kv = backend.exists_prefix(hashes)
    if not stagings or not kv:
        return kv
    ends = set(range(1, kv + 1))
    for staging in stagings:
        have = backend.exists_each([storage_key(h, staging.component.storage_pool) for h in hashes[:kv]])
        ends = {end for end in ends if all(have[max(0, end - staging.pages) : end])}
        if not ends:
            return 0
    return max(ends)


def allocate(host: HostSide, stagings: list[Staging], hit_pages: int) -> bool:
    """Host slots for each pool, its pages over the hit; a pool short of room has its
    host copies evicted once. On a failure what was taken goes back: False."""
    taken = []
    for staging in stagings:
        need = min(staging.pages, hit_pages) * staging.unit
        if not need:
            continue
        pool = host.pool(staging.name)
        if pool.available_size() < need:
            host.evict_host(need, staging.name)
        if pool.available_size() < need:
            release(host, taken)
            return False
        staging.slots = pool.allocator.alloc(need)
        taken.append(staging)
    return True


def read(host: HostSide, backend: StorageBackend, stagings: list[Staging], hashes: list[str]) -> None:
    """All the KV came back: each pool's keys are its last pages over the hit (its slots
    beyond them go back), read until the first page that does not come back."""
    for staging in stagings:
        staging.keys = hashes[max(0, len(hashes) - staging.pages) :]
        if staging.slots is None:
            continue
        pool, unit = host.pool(staging.name), staging.unit
        need = len(staging.keys) * unit
        if staging.slots.shape[0] > need:
            pool.free(staging.slots[need:])
            staging.slots = staging.slots[:need]
        pages = backend.get([storage_key(h, staging.component.storage_pool) for h in staging.keys])
        for i, page in enumerate(pages):
            if not pool.write_page(staging.slots[i * unit : (i + 1) * unit], page):
                break
            staging.read = i + 1


def shortfall(stagings: list[Staging]) -> str:
    """Why an all-or-nothing check fails, in words ("" when every pool is complete)."""
    short = [s for s in stagings if not s.complete]
    if not short:
        return ""
    return ", ".join(f"{s.name} read {s.read} of {len(s.keys) if s.keys is not None else s.pages} page(s)"
                     for s in short)


def release(host: HostSide, stagings: list[Staging]) -> None:
    """Give every pool's slots back."""
    for staging in stagings:
        if staging.slots is not None:
            host.pool(staging.name).free(staging.slots)
            staging.slots = None


def commit(host: HostSide, stagings: list[Staging], anchor: TreeNode, target: Optional[TreeNode],
           total_len: int) -> list[str]:
    """Hand each pool's slots to its component; free what it did not keep. Returns the
    pools whose data was placed."""
    placed = []
    for staging in stagings:
        if staging.slots is None:
            continue
        unused = staging.component.commit_prefetch(anchor, target, total_len, staging.slots)
        for part in unused:
            if part.numel():
                host.pool(staging.name).free(part)
        if sum(int(p.numel()) for p in unused) < staging.slots.numel():
            placed.append(staging.name)
        staging.slots = None
    return placed


def backup_parts(host: HostSide, node: TreeNode) -> tuple:
    """(component name, storage keys, host slots) a store of ``node`` writes besides
    its KV (v0.5.23's BACKUP_STORAGE transfers of SWA and Mamba)."""
    parts = []
    for component in host.cache.tree.host_components:
        found = component.storage_backup(node) if component.storage_pool else None
        if found is not None:
            hashes, slots = found
            parts.append((component.name, tuple(storage_key(h, component.storage_pool) for h in hashes), slots))
    return tuple(parts)


def write_parts(host: HostSide, backend: StorageBackend, parts: tuple) -> int:
    """Write a store's SWA and Mamba pages (before its KV, as v0.5.23); returns the pages
    stored."""
    stored = 0
    for name, keys, slots in parts:
        pool = host.pool(name)
        unit = int(slots.shape[0]) // len(keys)
        pages = [pool.page_bytes(slots[i * unit : (i + 1) * unit]) for i in range(len(keys))]
        stored += sum(1 for ok in backend.set(list(keys), pages) if ok)
    return stored
