"""The Full pool's invariants for the full sweep: it balances against the reachable
nodes' Full slots and the running requests' own (the per-page counting is
``pools/balance.py``'s)."""

from __future__ import annotations

from ..basics.violation import Violation
from ..pools.balance import owned_pages, pool_balance, segment_pages


def check_full_pool(cache, cols, out: list[Violation]) -> None:
    """The Full pool against the reachable nodes' Full slots and the running requests."""
    pool = cache.kv_pool
    tree_pages = owned_pages(pool, cols.full_slots, cols.full_owner if pool.page_size > 1 else None)
    held_pages = segment_pages(pool, [req.own_indices for req in cache.kv_holders()])
    out.extend(Violation(name, msg) for name, msg in pool_balance(pool, tree_pages, held_pages))
