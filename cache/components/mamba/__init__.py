"""Mamba/SSM state: one state slot per checkpoint node. Device part, the
checkpoint cap, host part, config fields and checks.
"""

COMPONENT = ".component:MambaComponent"
HOST_PART = ".host:MambaHostMixin"
CHECKS = ".checks"
FIELDS = ".fields"

# what the workbench reads to label, group and compare this component without naming it
DISPLAY_NAME = "Mamba"  # its name in headings and labels
NOUN = "Mamba state"  # what it holds, in a sentence
UNIT = ("state", "states")  # what its sizes count, singular and plural
IN_SGLANG = True  # SGLang 0.5.23's unified cache has it: the bridge compares it
HOLDS_STATES = True  # one state slot per node, not a slot per token: amounts count states
SPLIT_STAYS_BELOW = True  # a split leaves its data (and its locks) on the lower node
