"""The sidecar: a per-stride extra value beside Full KV. Device part, its entries
(pool and stride arithmetic), host part and checks.
"""

COMPONENT = ".component:SidecarComponent"
HOST_PART = ".host:SidecarHostMixin"
CHECKS = ".checks"
