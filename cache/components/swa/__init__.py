"""Sliding-window attention KV: only a trailing window stays on the device; older
pages are tombstoned. Device part, host part, config fields and checks.
"""

COMPONENT = ".component:SWAComponent"
HOST_PART = ".host:SWAHostMixin"
CHECKS = ".checks"
FIELDS = ".fields"
EVICT_FIELD = "swa_num_tokens"  # EvictParams' field for it (SGLang's name)
CALLS = ("free_swa",)  # the cache call that frees only its side of Full's slots
IN_STORAGE = True  # the storage tier keeps its window's pages

# what the workbench reads to label, group and compare this component without naming it
DISPLAY_NAME = "SWA"  # its name in headings and labels
NOUN = "SWA KV"  # what it holds, in a sentence
UNIT = ("slot", "slots")  # what its sizes count, singular and plural
IN_SGLANG = True  # SGLang 0.5.23's unified cache has it: the bridge compares it
HAS_WINDOW = True  # keeps only a trailing window: configs size its pool by sliding_window, ops may slide it
REQUEST_FIELDS = ("evicted_seqlen",)  # request_extras a scenario may expect, as swa_<field> (its window cursor)
