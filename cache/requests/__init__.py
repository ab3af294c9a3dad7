"""The scheduler's side of the cache: a request's life from admission to caching,
admission with load-back from the host tier, decode retraction, restore and abort, reading the controller by ``owner.RequestOwner``.

May import every room below ``controller``.
"""
