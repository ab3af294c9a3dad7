"""The invariant checker: the full sweep, the per-step incremental probes, and the
host tier's, pools' and sessions' invariants. It reads a built cache and is never
imported by it.

May import every room.
"""
