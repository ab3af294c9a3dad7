"""``UnifiedRadixCache``, the controller on top: it owns the pools and the tiers,
asks the tree what to do and executes it, and takes the inspection snapshot.

May import every room but ``checks``.
"""
