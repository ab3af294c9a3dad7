"""Full attention KV: every token's KV on the device, the component every model has.
Its device part (``component``) and its host part (``host``).
"""
