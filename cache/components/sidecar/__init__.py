"""The sidecar: a per-stride extra value beside Full KV. Device part, its entries
(pool and stride arithmetic), host part and checks.
"""

COMPONENT = ".component:SidecarComponent"
HOST_PART = ".host:SidecarHostMixin"
CHECKS = ".checks"

# what the workbench reads to label, group and compare this component without naming it
DISPLAY_NAME = "Sidecar"  # its name in headings and labels
NOUN = "sidecar values"  # what it holds, in a sentence
UNIT = ("value", "values")  # what its sizes count, singular and plural
IN_SGLANG = False  # ours only: SGLang has no such component, so the bridge leaves it out
