"""The radix tree alone: nodes, the one walk along a key, LRU lists and the leaf
policies, the tree core (match, insert, split, locks, eviction and its cascade),
which nodes carry host copies, session tags and the hook table that says which
components take part in each hook. It decides; it never touches a pool.

What it asks of a component is written down here (``component_api``), so the tree
reads alone. May import: ``basics``, ``observe``.
"""
