"""The invariant checker: the full sweep (``invariants``, over the tree's ``structure``,
``locks``, ``pools``, ``host`` tier and ``sessions``), the per-step probes
(``incremental``) and each component's own checks, asked of the registry
(``component_checks``). It reads a built cache and is never imported by it.

May import every room.
"""
