"""The model options of SGLang 0.5.23 the fuzzer and the differential runs sweep.

Each row is one option set (the [config] fields it adds) and the component sets it
applies to. ``urc fuzz --sweep-options`` runs its episodes through the rows that fit
its components, ``tools/differential_requests.py --sweep-options`` runs every row
against SGLang, and the bridge tests run each row once in small. A table value
(``eviction_policy_config``) is written as a tuple of (key, value) pairs so a config
stays hashable.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cache.tree.leaf_policies import POLICIES

from ..ops.spec import BASE
from .config import FuzzConfig, frozen


@dataclasses.dataclass(frozen=True)
class OptionSet:
    options: tuple[tuple[str, Any], ...]
    needs: tuple[str, ...] = (BASE,)  # the components the options belong to
    pages: tuple[int, ...] = (1, 4)  # the page sizes it is swept at

    def fits(self, components: tuple[str, ...]) -> bool:
        return set(self.needs) <= set(components)

    def label(self) -> str:
        return FuzzConfig(options=self.options).label().split(" p1", 1)[1].strip()


def option_set(needs: tuple[str, ...] = (BASE,), pages: tuple[int, ...] = (1, 4), **options: Any) -> OptionSet:
    return OptionSet(tuple(sorted((k, frozen(v)) for k, v in options.items())), needs, pages)


_POLICIES = tuple(POLICIES)  # every eviction policy the cache registers

MAMBA_OPTION_SETS = (  # the Mamba options (issue 28): cap at page 1 only (the oracle's reach)
    option_set(("full", "mamba"), (1,), mamba_max_states_per_path=1),
    option_set(("full", "mamba"), (1,), mamba_max_states_per_path=2),
    option_set(("full", "swa", "mamba"), (1,), mamba_max_states_per_path=2),
    option_set(("full", "mamba"), (1,), mamba_extra_buffer=True),
    option_set(("full", "mamba"), (1, 4), mamba_skip_decode_lock=True),
)
SWA_OPTION_SETS = (  # the SWA options (issue 28)
    option_set(("full", "swa"), (1, 4), swa_draft_window=8),
    option_set(("full", "swa"), (1, 4), swa_gates_prefix_match=False),
    option_set(("full", "swa"), (1, 4), swa_free_out_of_window=False),
)

OPTION_SETS: tuple[OptionSet, ...] = (  # one row per option value worth a run (issue 28)
    *MAMBA_OPTION_SETS,
    *SWA_OPTION_SETS,
    option_set(needs=("full",), pages=(1, 4), is_eagle=True),  # EAGLE bigram keys (off with Mamba, as upstream)
    option_set(needs=("full", "swa"), pages=(1, 4), is_eagle=True),  # … and SWA's branch point and frees
    # the eight eviction policies on Full's leaves, and the two with arguments off their defaults
    *(option_set(eviction_policy=name) for name in _POLICIES),
    option_set(eviction_policy="slru", eviction_policy_config={"protected_threshold": 1}),
    option_set(eviction_policy="tlru", eviction_policy_config={"threshold": 12, "next_prompt_estimate": 4}),
    # Full's policy beside the auxiliary components' own LRU lists
    *(option_set(needs=needs, pages=(1,), eviction_policy=name)
      for name in ("priority", "lfu") for needs in (("full", "swa"), ("full", "mamba"))),
)


def option_sets_for(components: tuple[str, ...]) -> list[OptionSet]:
    return [row for row in OPTION_SETS if row.fits(components)]
