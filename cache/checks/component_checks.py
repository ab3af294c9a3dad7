"""Each component's own checks, asked of the registry (the module its folder declares
as ``CHECKS``): the one place the checker calls them. A component without checks, or
without one of them, passes it."""

from __future__ import annotations

from ..basics.violation import Violation
from ..components import COMPONENT_REGISTRY


def _hook(component, name: str):
    module = COMPONENT_REGISTRY.checks(component.name)
    return None if module is None else getattr(module, name, None)


def check(component, cols=None) -> list[tuple[str, str]]:
    """The full sweep's (name, message) violations of ``component``'s own data; ``cols``:
    the sweep's ``NodeColumns`` over every registered node (None: the check builds them)."""
    run = _hook(component, "check")
    return [] if run is None else run(component, cols)


def probe(component, nodes: list) -> bool:
    """The per-step check: False when the component's data on ``nodes`` (touched by a
    step) or its O(1) balances look wrong; the full sweep then names what it is."""
    run = _hook(component, "probe")
    return True if run is None else run(component, nodes)


def verify_match(component, tokens: list[int], result) -> list[Violation]:
    """Extra proof that a match handed out the right data of ``component``."""
    run = _hook(component, "verify_match")
    return [] if run is None else run(component, tokens, result)


def check_host(component, pool, nodes: list) -> list[tuple[str, str]]:
    """(name, message) for host copies among ``nodes`` that hold the wrong data (the
    generic checks of slots, counts and balance are host.py's)."""
    run = _hook(component, "check_host")
    return [] if run is None else run(component, pool, nodes)


def probe_host(component, pool, nodes: list) -> bool:
    """The per-step twin of ``check_host`` over the touched nodes."""
    run = _hook(component, "probe_host")
    return not check_host(component, pool, nodes) if run is None else run(component, pool, nodes)
