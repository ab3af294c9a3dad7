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

from .config import FuzzConfig

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
        if "swa" in config.components:  # the SWA pool must hold the longest prompt too
            twin = dataclasses.replace(twin, swa_kv_size=kv)
        if "mamba" in config.components:
            twin = dataclasses.replace(twin, mamba_size=states)
        twins.append(twin)
    return twins


def sweep_configs(faults: tuple[str, ...] = ()) -> list[FuzzConfig]:
    """The configs to sweep: every scale config (with ``faults``: the configs their
    detection searches, each with the faults on), then their pool twins."""
    from .fuzz import SCALE_CONFIGS, configs_for

    if not faults:
        base = list(SCALE_CONFIGS)
    else:
        needs = fault_needs(faults)
        base = [dataclasses.replace(c, faults=faults) for c in configs_for(**needs)]
    return base + [twin for config in base for twin in pool_twins(config)]


def fault_needs(faults: tuple[str, ...]) -> dict:
    """What the faults need together: ``configs_for``'s arguments (their components'
    union, sessions if any needs them, their options, the storage tier's policy)."""
    from cache.faults import catalogue

    known = catalogue()
    entries = [known[name] for name in faults]
    components = tuple(sorted({c for f in entries for c in f.components}, key=("full", "swa", "mamba").index))
    options: dict = {}
    storage: Optional[str] = None
    for fault in entries:
        options.update(dict(fault.options))
        storage = storage or fault.storage
    return {"components": components or ("full",), "sessions": any(f.sessions for f in entries),
            "options": tuple(options.items()), "storage": storage}
