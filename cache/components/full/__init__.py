"""Full attention KV: every token's KV on the device, the component every model has.
Its device part (``component``) and its host part (``host``, mixed into the device
part: the host tier treats Full itself, so the registry names no host part).
"""

COMPONENT = ".component:FullComponent"
EVICT_FIELD = "num_tokens"  # EvictParams' field for it (SGLang's name)
IN_STORAGE = True  # the storage tier keeps its pages
