"""Which components take part in each hook, decided once per cache, one way.

A component overrides only the hooks it cares about (see components/base.py). A hook
runs for exactly the components whose class replaces the no-op default that the base
class marks with ``default_hook`` (``overriding``): the controller and the request flows
ask the ``HookTable`` built from that, and the tree core builds its per-node hook lists
with the same function.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from .component_api import TreeComponentAPI, is_default_hook

Components = tuple[TreeComponentAPI, ...]


def overriding(components: Sequence[TreeComponentAPI], hook: str) -> Components:
    """The components, in order, whose class replaces the base class's default ``hook``
    (the function marked ``default_hook``). A hook with no marked default in a
    component's classes is a mistake, not an override: AttributeError."""
    out = []
    for component in components:
        cls = type(component)
        if not any(is_default_hook(vars(k).get(hook)) for k in cls.__mro__):
            raise AttributeError(f"{cls.__name__}.{hook}: no default_hook of that name in its classes")
        if not is_default_hook(getattr(cls, hook)):
            out.append(component)
    return tuple(out)


# fields filled from the component classes' flags, not from a hook
_NOT_HOOKS = ("kv_peers", "own_pools")


@dataclasses.dataclass(frozen=True, slots=True)
class HookTable:
    """Per hook, the components to call (in component order)."""

    # match and insert
    finalize_match_in_cache: Components  # adjusts a match the tree returned (Mamba's copy-on-write)
    check_insert_params: Components  # refuses an insert's own values before the walk (Mamba's state)
    # pools
    kv_peers: Components  # pools that follow Full KV slot for slot (``kv_peer``: SWA)
    own_pools: Components  # components with a pool of their own to reset (every one but Full)
    # admission and decode
    pinned_by_lock: Components
    slots_for_request: Components
    reserve_request: Components
    admit_request: Components
    advance_request: Components
    release_request: Components
    # caching a request
    caching_len: Components  # read-only caps, for the refusal check before a checkpoint changes anything
    prepare_for_caching_req: Components
    floor_cache_len: Components
    free_out_of_window_slots: Components
    cleanup_after_caching_req: Components
    slide_window: Components  # frees what a decoding request no longer needs (SWA's window)
    # inspection
    request_extras: Components  # components that show request state in the snapshot

    @classmethod
    def of(cls, components: Sequence[TreeComponentAPI]) -> HookTable:
        by_override = {
            field.name: overriding(components, field.name)
            for field in dataclasses.fields(cls)
            if field.name not in _NOT_HOOKS
        }
        return cls(
            kv_peers=tuple(c for c in components if c.kv_peer),
            own_pools=tuple(c for c in components if hasattr(type(c), "reset_pool")),
            **by_override,
        )
