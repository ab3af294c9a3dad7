"""The sidecar: a per-stride extra value beside Full KV. Device part, its entries
(pool and stride arithmetic), host part and checks.
"""

COMPONENT = ".component:SidecarComponent"
HOST_PART = ".host:SidecarHostMixin"
CHECKS = ".checks"

# what the workbench reads to label, group and compare this component without naming it
IN_SGLANG = False  # ours only: SGLang has no such component, so the bridge leaves it out
