"""Cache configuration, validated once so a bad config never half-builds a cache."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Optional

from ..basics.base_component import FULL


@dataclasses.dataclass(frozen=True)
class CacheConfig:
    components: tuple[str, ...] = (FULL,)
    page_size: int = 1
    kv_size: int = 1024  # Full KV pool, tokens
    sliding_window: Optional[int] = None  # required with "swa"
    swa_kv_size: Optional[int] = None  # default: kv_size
    mamba_size: Optional[int] = None  # state slots, required with "mamba"
    device: str = "auto"
    auto_evict: bool = True  # allocations evict their shortfall first
    faults: tuple[str, ...] = ()  # upstream bugs to re-introduce (cache/faults); none by default
    # v0.5.23's --enable-session-radix-cache: finished session requests tag their KV (session_refs.py)
    session_radix_cache: bool = False
    # EAGLE speculative decoding: keys are token pairs (bigrams), N tokens make N - 1
    # units; SGLang 0.5.23 turns it off with Mamba (see ``bigram_keys``)
    is_eagle: bool = False
    # v0.5.23's --radix-eviction-policy for Full's leaves (evict_policy.py) and its keyword arguments
    eviction_policy: str = "lru"
    eviction_policy_config: Optional[Mapping[str, Any]] = dataclasses.field(default=None, hash=False)
    # v0.5.23's --kv-events-config (enable_kv_cache_events): the tree records SGLang's KV events (kv_events.py)
    enable_kv_cache_events: bool = False
    hicache: Optional[Mapping[str, Any]] = None  # the host tier: HiCacheConfig's fields (None: no host tier)
    # Fields a component declares itself (``config_fields``), named "<component>_<field>":
    # checked here for their owner only (no import), by the component when the cache is built.
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False)

    @classmethod
    def of(cls, **fields) -> CacheConfig:
        """A config from flat fields (a scenario's [config], keyword arguments): the ones
        this class does not name go to ``extra``."""
        own = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        extra = {**fields.pop("extra", {}), **{k: v for k, v in fields.items() if k not in own}}
        return cls(**{k: v for k, v in fields.items() if k in own}, extra=extra)

    def __post_init__(self) -> None:
        from ..components import COMPONENT_REGISTRY

        comps = tuple(self.components)
        object.__setattr__(self, "components", comps)
        if not comps or comps[0] != FULL:
            raise ValueError(f"components must start with 'full' (got {list(comps)})")
        unknown = [c for c in comps if c not in COMPONENT_REGISTRY]
        if unknown:
            raise ValueError(f"unknown component(s) {unknown}; known: {sorted(COMPONENT_REGISTRY)}")
        if len(set(comps)) != len(comps):
            raise ValueError(f"duplicate component in {list(comps)}")
        for name in ("page_size", "kv_size", "sliding_window", "swa_kv_size", "mamba_size"):
            value = getattr(self, name)
            if value is None and name not in ("page_size", "kv_size"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int (got {value!r})")
            if value > COMPONENT_REGISTRY.size_bound(name):
                raise ValueError(f"{name} {value} is larger than this workbench supports "
                                 f"({COMPONENT_REGISTRY.size_bound(name):,}: "
                                 "its pools are allocated whole)")
        if not isinstance(self.session_radix_cache, bool):
            raise ValueError(f"session_radix_cache must be true or false (got {self.session_radix_cache!r})")
        if not isinstance(self.enable_kv_cache_events, bool):
            raise ValueError(f"enable_kv_cache_events must be true or false (got {self.enable_kv_cache_events!r})")
        if not isinstance(self.is_eagle, bool):
            raise ValueError(f"is_eagle must be true or false (got {self.is_eagle!r})")
        if self.kv_size % self.page_size:
            raise ValueError(f"kv_size {self.kv_size} must be a multiple of page_size {self.page_size}")
        for name in comps:  # the model fields a component cannot do without (its fields module's REQUIRED)
            rules = COMPONENT_REGISTRY.fields(name)
            for field in getattr(rules, "REQUIRED", ()):
                value = getattr(self, field)
                if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                    raise ValueError(f"{field} (a positive int) is required when {name!r} is a component")
        from ..tree.leaf_policies import make_policy

        policy_config = self.eviction_policy_config
        if policy_config is not None and not isinstance(policy_config, Mapping):
            raise ValueError(f"eviction_policy_config must be a table (got {policy_config!r})")
        make_policy(self.eviction_policy, policy_config)  # unknown name or argument: ValueError
        object.__setattr__(self, "eviction_policy", self.eviction_policy.lower())
        object.__setattr__(self, "eviction_policy_config", dict(policy_config) if policy_config else None)
        object.__setattr__(self, "extra", dict(self.extra))
        for key in self.extra:
            if not any(key.startswith(f"{c}_") for c in comps[1:]):
                from .reference import FIELD_NAMES, did_you_mean

                if key in FIELD_NAMES:  # a field of a component not listed
                    raise ValueError(f"{key} is a field of {key.partition('_')[0]!r}, which components "
                                     f"{list(comps)} does not list")
                raise ValueError(f"unknown config field {key!r}{did_you_mean(key)} (a component's own field is "
                                 "'<component>_<name>')")
        _check_declared_fields(comps, self.extra, self.page_size)  # SWA's and Mamba's values, before a cache is built
        object.__setattr__(self, "faults", tuple(self.faults))
        if self.faults:
            from ..faults import check_fault_names

            check_fault_names(self.faults, comps)
        if self.hicache is not None:  # checked by host_config.py, with each component's host part
            from ..tiers.hicache_config import HiCacheConfig

            object.__setattr__(self, "hicache", HiCacheConfig.of(self.hicache, self))
        if self.device not in ("auto", "cpu", "cuda") and not str(self.device).startswith("cuda:"):
            raise ValueError(f"device must be auto, cpu or cuda (got {self.device!r})")

    @property
    def bigram_keys(self) -> bool:
        """Whether the tree keys bigrams: is_eagle, except with a component that turns
        it off (Mamba; v0.5.23's tree core: ``is_eagle and MAMBA not in components``)."""
        from ..components import COMPONENT_REGISTRY

        return self.is_eagle and "is_eagle" not in COMPONENT_REGISTRY.turned_off(self.components)

    @property
    def swa_pool_size(self) -> int:
        return self.swa_kv_size if self.swa_kv_size is not None else self.kv_size


def _check_declared_fields(components: tuple[str, ...], extra: Mapping[str, Any], page_size: int) -> None:
    """Each given field of a component that declares its fields' rules (its ``fields``
    module, read through the registry: SWA's, Mamba's) is one it declares, with a valid
    value. Any other component's fields are checked by its ``check_config_value`` at build."""
    from ..components import COMPONENT_REGISTRY
    from .reference import did_you_mean

    for key, value in extra.items():
        for name in components:
            rules = COMPONENT_REGISTRY.fields(name) if key.startswith(f"{name}_") else None
            if rules is not None:
                if key not in rules.FIELDS:
                    raise ValueError(f"unknown config field {key!r}{did_you_mean(key, rules.FIELDS)}; "
                                     f"{name}'s own fields: {', '.join(rules.FIELDS)}")
                rules.check(key, value, page_size)
