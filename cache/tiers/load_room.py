"""Device room for a load-back: the slots a load takes, and what v0.5.23 evicts
on its way to a load it then calls off. Used by the host tier (host.py); reads the
controller by ``TierOwner``'s names only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..basics.base_component import FULL
from ..basics.params import EvictParams

if TYPE_CHECKING:
    from .owner import TierOwner


def evict_for_refused_load(cache: TierOwner, kv_tokens: int, aux, req=None) -> None:
    """What v0.5.23 evicts on its way to a load that cannot be covered: it takes
    the pools one at a time, each evicting its own shortfall, and stops at the
    first still short. Full first (_load_back_transfers), then each auxiliary
    component in turn (the controller's side-pool allocation, whose evict
    callback covers that pool's shortfall: an SWA load's may delete leaves and
    free Full KV with them)."""
    short = _full_shortfall(cache, kv_tokens)
    if short > 0:
        cache.evict_for_alloc(EvictParams(num_tokens=short))
        if _full_shortfall(cache, kv_tokens) > 0:
            return
    for component, nodes in aux:
        short = component.load_shortfall(nodes, req)
        if short > 0:
            cache.evict_for_alloc(EvictParams.of({component.name: short}))
            if component.load_shortfall(nodes, req) > 0:
                return


def alloc_for_load(cache: TierOwner, kv_tokens: int, aux, req=None) -> tuple:
    """Device slots for a load: Full KV only for its tokens (no SWA peers: SWA
    comes back only for its window) and each auxiliary component's share; every
    pool is checked first, then eviction covers the shortfalls."""
    pool = cache.kv_pool
    shorts = {FULL: _full_shortfall(cache, kv_tokens)}
    for component, nodes in aux:
        shorts[component.name] = component.load_shortfall(nodes, req)
    if any(short > 0 for short in shorts.values()):
        cache.ensure_capacity(shorts, {}, True)
        cache.evict_for_alloc(EvictParams.of({name: max(0, short) for name, short in shorts.items()}))
    slots = pool.alloc(kv_tokens) if kv_tokens else None
    taken = {}
    try:
        for component, nodes in aux:
            taken[component.name] = component.alloc_for_load(nodes, req)
    except BaseException:
        if slots is not None:
            cache.free_kv([slots], full_only=True)
        for component, _ in aux:
            if component.name in taken:
                component.free_load(taken[component.name])
        raise
    return slots, taken


def _full_shortfall(cache: TierOwner, kv_tokens: int) -> int:
    """Full slots a load of ``kv_tokens`` lacks (whole pages), 0 or less when it fits."""
    pool = cache.kv_pool
    return pool.pages_for(kv_tokens) * cache.page_size - pool.available_size()
