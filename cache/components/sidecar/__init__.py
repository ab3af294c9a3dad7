"""The sidecar: a per-stride extra value beside Full KV. Device part, host part
and checks.
"""
