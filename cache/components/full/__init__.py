"""Full attention KV: every token's KV on the device, the component every model has.
Its device part (``component``) and its host part (``host``, mixed into the device
part: the host tier treats Full itself, so the registry names no host part).
"""

COMPONENT = ".component:FullComponent"
