"""How large a pool may be: every pool is allocated whole when the cache is built, so
the largest cache a config may ask for must fit a few GB. Read by the config's checks,
its reference and the components that size their pools."""

# Every pool is allocated whole when the cache is built (a 2**30-token pool took 24 GB),
# so each is bounded for the largest cache to stay within a few GB:
MAX_POOL = 2**22  # a device pool's units, ~70 bytes a token: ~300 MB (also caps page_size and sliding_window)
MAX_STATES = 2**18  # Mamba state slots, ~700 bytes each: ~180 MB
HOST_FACTOR = 3  # a host pool may be 3x its device bound: its default is twice the device pool plus a page


def size_bound(name: str) -> int:
    """The most units a size field may give (``host_<name>_size``: a host pool's)."""
    bound = MAX_STATES if "mamba" in name else MAX_POOL
    return bound * HOST_FACTOR if name.startswith("host_") else bound
