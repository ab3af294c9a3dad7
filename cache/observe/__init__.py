"""What the cache tells the outside: the event stream (every change and its cause),
the deferred actions the tree hands the controller, one eviction's bookkeeping,
running metrics, SGLang's KV events and the read-only views a snapshot is made of.

May import: ``basics``.
"""
