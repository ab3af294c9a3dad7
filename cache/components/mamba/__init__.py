"""Mamba/SSM state: one state slot per checkpoint node. Device part, the
checkpoint cap, host part, config fields and checks.
"""

from ...basics.limits import MAX_STATES

COMPONENT = ".component:MambaComponent"
HOST_PART = ".host:MambaHostMixin"
CHECKS = ".checks"
FIELDS = ".fields"
EVICT_FIELD = "mamba_num"  # EvictParams' field for it (SGLang's name)
CALLS = ("alloc_mamba_state", "free_mamba_state")  # the cache calls on its state pool
POOL_BOUND = MAX_STATES  # its pools hold states, each far larger than a token's KV
TURNS_OFF = ("is_eagle",)  # SGLang 0.5.23 keys no bigrams with Mamba (CacheConfig.bigram_keys)
IN_STORAGE = True  # the storage tier keeps each page's last state

# what the workbench reads to label, group and compare this component without naming it
DISPLAY_NAME = "Mamba"  # its name in headings and labels
NOUN = "Mamba state"  # what it holds, in a sentence
UNIT = ("state", "states")  # what its sizes count, singular and plural
IN_SGLANG = True  # SGLang 0.5.23's unified cache has it: the bridge compares it
HOLDS_STATES = True  # one state slot per node, not a slot per token: amounts count states
SPLIT_STAYS_BELOW = True  # a split leaves its data (and its locks) on the lower node
REQUEST_FIELDS = ("last_track_seqlen",)  # request_extras a scenario may expect, as mamba_<field> (its checkpoint cursor)
