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
