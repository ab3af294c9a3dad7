"""How large a pool may be: every pool is allocated whole when the cache is built, so
the largest cache a config may ask for must fit a few GB. Read by the config's checks,
its reference and the components that size their pools; a component's folder names
its pools' bound (``POOL_BOUND``) and the registry's ``size_bound`` reads it."""

# Every pool is allocated whole when the cache is built (a 2**30-token pool took 24 GB),
# so each is bounded for the largest cache to stay within a few GB:
MAX_POOL = 2**22  # a device pool's units, ~70 bytes a token: ~300 MB (also caps page_size and sliding_window)
MAX_STATES = 2**18  # Mamba state slots, ~700 bytes each: ~180 MB
HOST_FACTOR = 3  # a host pool may be 3x its device bound: its default is twice the device pool plus a page

