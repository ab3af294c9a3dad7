"""A pool's balance, counted per page: available + cached + held == total, no page both
free and used or owned twice, ownership marks agreeing with the free list. Each side
(tree, requests, free list) comes as one tensor of page ids counted with ``bincount``:
no Python sets over every slot, no sort. The checker and the components' checks share it.
"""

from __future__ import annotations

from typing import Optional

import torch


def segment_pages(pool, values: list[torch.Tensor]) -> torch.Tensor:
    """``pool.page_ids`` of every value, concatenated (each value's pages once, so two
    values sharing a page still show it twice)."""
    values = [v for v in values if v.shape[0]]
    if not values:
        return torch.empty(0, dtype=torch.int64, device=pool.device)
    if len(values) == 1:
        return pool.page_ids(values[0])
    flat = torch.cat(values)
    if pool.page_size == 1:
        return flat
    lengths = torch.tensor([v.shape[0] for v in values], device=flat.device)
    return owned_pages(pool, flat, torch.repeat_interleave(torch.arange(len(values), device=flat.device), lengths))


def owned_pages(pool, slots: torch.Tensor, owner: Optional[torch.Tensor]) -> torch.Tensor:
    """The pages of ``slots``, once per (owner, page): what ``segment_pages`` gives for
    values already concatenated, ``owner`` naming the value each slot came from."""
    if pool.page_size == 1:
        return slots
    pages = torch.div(slots, pool.page_size, rounding_mode="floor")
    return torch.unique(torch.stack([owner, pages]), dim=1)[1]


def pool_balance(pool, tree_pages, held_pages) -> list[tuple[str, str]]:
    """available + cached + held == total, no page both free and used or owned twice,
    and the allocator's ownership marks agree with its free list. Pages are tensors
    (or lists) of page ids, one entry per page a node or request holds."""
    tree_pages, held_pages = _as_pages(pool, tree_pages), _as_pages(pool, held_pages)
    out: list[tuple[str, str]] = []
    name, ps, n = pool.name, pool.page_size, pool.num_pages
    free, free_odd = _per_page(pool.free_pages(), n)
    tree, tree_odd = _per_page(tree_pages, n)
    held, held_odd = _per_page(held_pages, n)
    used, used_odd = (tree + held if held_pages.numel() else tree), torch.cat([tree_odd, held_odd])
    is_free = free.bool()
    if _max(free) > 1 or _has_repeats(free_odd):
        out.append((f"pool.{name}.free_twice", "a page sits on the free list twice"))
    if _max(used) > 1 or _has_repeats(used_odd):
        twice = ((used > 1).nonzero().flatten().tolist() + _repeats(used_odd))[:5]
        out.append((f"pool.{name}.owned_twice", f"page(s) owned twice: {sorted(twice)[:5]}"))
    both = (is_free & used.bool()).nonzero().flatten()
    both_odd = torch.unique(used_odd[torch.isin(used_odd, free_odd)]) if free_odd.numel() else used_odd[:0]
    if both.numel() or both_odd.numel():
        pages = sorted(both[:5].tolist() + both_odd[:5].tolist())
        out.append((f"pool.{name}.free_and_used", f"page(s) both free and in use: {pages[:5]}"))
    cached = (int(torch.count_nonzero(tree)) + torch.unique(tree_odd).numel()) * ps
    held_slots = (int(torch.count_nonzero(held)) + torch.unique(held_odd).numel()) * ps
    available = pool.available_size()
    if available + cached + held_slots != pool.size:
        out.append(
            (
                f"pool.{name}.balance",
                f"available {available} + cached {cached} + held {held_slots} != total {pool.size} "
                f"(leak of {pool.size - available - cached - held_slots})",
            )
        )
    bad = ((pool.owned_mask() == 0) != is_free).nonzero().flatten()
    if bad.numel():
        out.append((f"pool.{name}.ownership", f"ownership marks disagree with the free list on page(s) {bad[:5].tolist()}"))
    return out


def _per_page(pages: torch.Tensor, num_pages: int) -> tuple[torch.Tensor, torch.Tensor]:
    """How often each page in [0, num_pages) occurs, and the entries outside that range
    (only a corrupt value has those)."""
    if pages.numel() == 0:
        return torch.zeros(num_pages, dtype=torch.int64, device=pages.device), pages
    lo, hi = pages.aminmax()
    if int(lo) >= 0 and int(hi) < num_pages:
        return torch.bincount(pages, minlength=num_pages), pages[:0]
    inside = (pages >= 0) & (pages < num_pages)
    return torch.bincount(pages[inside], minlength=num_pages), pages[~inside]


def _max(counts: torch.Tensor) -> int:
    return int(counts.max()) if counts.numel() else 0


def _has_repeats(pages: torch.Tensor) -> bool:
    return bool(pages.numel()) and torch.unique(pages).numel() != pages.numel()


def _repeats(pages: torch.Tensor) -> list[int]:
    if not pages.numel():
        return []
    values, counts = torch.unique(pages, return_counts=True)
    return values[counts > 1].tolist()


def _as_pages(pool, pages) -> torch.Tensor:
    if isinstance(pages, torch.Tensor):
        return pages.to(torch.int64)
    return torch.tensor(pages, dtype=torch.int64, device=pool.device)
