"""Full attention KV: every token's KV on the device, the component every model has.
Its device part (``component``) and its host part (``host``, mixed into the device
part: the host tier treats Full itself, so the registry names no host part).
"""

COMPONENT = ".component:FullComponent"
EVICT_FIELD = "num_tokens"  # EvictParams' field for it (SGLang's name)
IN_STORAGE = True  # the storage tier keeps its pages

# what the workbench reads to label, group and compare this component without naming it
BASE = True  # every cache has it, first: the other components hang their data on its nodes
DISPLAY_NAME = "Full"  # its name in headings and labels
NOUN = "Full KV"  # what it holds, in a sentence
UNIT = ("token", "tokens")  # what its sizes count, singular and plural
IN_SGLANG = True  # SGLang 0.5.23's unified cache has it: the bridge compares it
