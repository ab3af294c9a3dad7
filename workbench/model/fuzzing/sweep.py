"""The configs ``urc fuzz`` sweeps when no config is given: a fault is found only on a
config that exposes it (a page size above 1, all three components, a tight pool), and a
user should not have to guess which.

Without a fault: every scale config (each component set at page sizes 1, 4 and 16,
windows 2 to 16, the host tier) and twins of each with a tight and a roomy pool. With
faults: the configs their detection searches (``configs_for``: the components, sessions,
model options and storage tier they need) and the same twins, in short episodes, as
the detection table is made.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from cache.components import COMPONENT_REGISTRY
from cache.tiers.hicache_config import WRITE_POLICIES

from .config import FuzzConfig
from ..ops.spec import BASE, sglang_component_sets, stateful, windowed

FAULT_EPISODE = 300  # steps per episode with a fault on: a fault found early in a fresh cache shrinks fast
ROOMY_PAGES = 256  # a pool that rarely evicts: the paths where nothing is under pressure


def pool_twins(config: FuzzConfig) -> list[FuzzConfig]:
    """``config`` with the tightest pools its prompts fit (evictions on nearly every
    admission) and with roomy ones (long-lived trees, deep splits). The host tier keeps
    SGLang's own host sizes, so a config with one has no twins."""
    if config.hicache:
        return []
    page = config.page_size
    tight = -(-config.longest_prompt() // page) * page + 2 * page  # the longest prompt and two pages
    twins = []
    for kv, states in ((tight, 2), (ROOMY_PAGES * page, 16)):
        twin = dataclasses.replace(config, kv_size=kv)
        if windowed(config.components):  # the SWA pool must hold the longest prompt too
            twin = dataclasses.replace(twin, swa_kv_size=kv)
        if stateful(config.components):
            twin = dataclasses.replace(twin, mamba_size=states)
        twins.append(twin)
    return twins


SCALE_CONFIGS = (  # the configurations the fuzzer is run on at scale (README), cheapest first
    FuzzConfig(("full",), 1), FuzzConfig(("full",), 4), FuzzConfig(("full",), 16),
    FuzzConfig(("full", "swa"), 1, 4), FuzzConfig(("full", "swa"), 4, 2), FuzzConfig(("full", "swa"), 16, 16),
    FuzzConfig(("full", "mamba"), 1), FuzzConfig(("full", "mamba"), 4),
    FuzzConfig(("full", "swa", "mamba"), 1, 4),
    FuzzConfig(("full", "mamba"), 1, hicache="write_back"),  # admission with load-back (sglang#30986)
    FuzzConfig(("full",), 4, hicache="write_through"),  # the host tier: retraction backups, restore, abort
)


SESSION_CONFIGS = (  # the session ops drawn (streaming turns too): where the session faults are searched
    FuzzConfig(("full",), 1, sessions=True), FuzzConfig(("full",), 4, sessions=True),
    FuzzConfig(("full", "swa"), 1, 4, sessions=True), FuzzConfig(("full", "mamba"), 1, sessions=True),
)


STORAGE_CONFIGS = (  # a storage tier below the host tier, prefetch ops drawn: where the storage faults are searched
    FuzzConfig(("full",), 4, hicache="write_through"), FuzzConfig(("full",), 4, hicache="write_through_selective"),
    FuzzConfig(("full",), 1, hicache="write_back"),
    # prefetches that live across steps (their hit query delayed), where the admission poll can find one unfinished
    FuzzConfig(("full",), 4, hicache="write_through", delayed=True), FuzzConfig(("full",), 1, hicache="write_back", delayed=True),
    # SWA and Mamba stored too: trailing windows and states, all-or-nothing prefetch staging
    FuzzConfig(("full", "swa", "mamba"), 1, 4, mamba_size=12, hicache="write_through"),
    # EAGLE's bigram keys: pages stored and prefetched by their pairs' hashes (off with Mamba, so no Mamba here)
    FuzzConfig(("full",), 4, hicache="write_through", options=(("is_eagle", True),)),
    FuzzConfig(("full",), 1, hicache="write_back", options=(("is_eagle", True),)),
    FuzzConfig(("full", "swa"), 1, 4, hicache="write_through", options=(("is_eagle", True),)),
)


def configs_for(components: tuple[str, ...], sessions: bool = False, options: tuple = (),
                storage: Optional[str] = None, host_tier: bool = False) -> list[FuzzConfig]:
    """The scale configs (``sessions``: the session configs; ``storage``: the storage
    configs under that prefetch stop policy) that carry these components, fewest
    components first, each with ``options`` (a fault's model options) added;
    ``host_tier``: only those with a host tier."""
    pool = SESSION_CONFIGS if sessions else SCALE_CONFIGS
    if storage:
        pool = tuple(dataclasses.replace(c, storage=storage) for c in STORAGE_CONFIGS)
    fits = [c for c in pool if set(components) <= set(c.components) and (c.hicache or not host_tier)]
    return [c.with_options(dict(options)) for c in sorted(fits, key=lambda c: len(c.components))]



HOST_POLICIES = (None, *WRITE_POLICIES)  # None: no host tier
AGAINST_PAGES = (1, 4)


def against_configs(pages: tuple[int, ...] = AGAINST_PAGES) -> list[FuzzConfig]:
    """What ``urc fuzz --against sglang`` sweeps when no config is given: every set of
    the components SGLang has (the base alone, with each other, with all) × no host
    tier and each write policy × sessions off and on × ``pages``; a window of 4."""
    return [FuzzConfig(components, page, 4, hicache=policy, sessions=sessions) for components in sglang_component_sets()
            for policy in HOST_POLICIES for sessions in (False, True) for page in pages]


def sweep_configs(faults: tuple[str, ...] = ()) -> list[FuzzConfig]:
    """The configs to sweep: every scale config (with ``faults``: the configs their
    detection searches, each with the faults on), then their pool twins."""
    if not faults:
        base = list(SCALE_CONFIGS)
    else:
        needs = fault_needs(faults)
        base = [dataclasses.replace(c, faults=faults) for c in configs_for(**needs)]
    return base + [twin for config in base for twin in pool_twins(config)]


def fault_needs(faults: tuple[str, ...]) -> dict:
    """What the faults need together: ``configs_for``'s arguments (their components'
    union, sessions if any needs them, their options, the storage tier's policy, a
    host tier if one acts on it)."""
    from cache.faults import catalogue

    known = catalogue()
    entries = [known[name] for name in faults]
    components = tuple(sorted({c for f in entries for c in f.components}, key=list(COMPONENT_REGISTRY).index))
    options: dict = {}
    storage: Optional[str] = None
    for fault in entries:
        options.update(dict(fault.options))
        storage = storage or fault.storage
    return {"components": components or (BASE,), "sessions": any(f.sessions for f in entries),
            "options": tuple(options.items()), "storage": storage, "host_tier": any(f.host_tier for f in entries)}
