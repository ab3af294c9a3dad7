"""A cache's configuration, validated once so a bad config never half-builds a
cache, and the reference of every field a scenario can give.

Checking a config never imports torch. May import: ``basics``, ``tree`` (the leaf
policies), ``components`` (the registry), ``tiers`` (the host tier's config),
``faults`` (the catalogue's names).
"""
