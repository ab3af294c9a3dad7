"""The host tier's configuration (SGLang's HiCache), checked with the cache's.

Full KV's host pool is ``host_kv_size``; every other component takes part through its
host part (components/base_host.py), whose pool is sized by ``host_<name>_size``."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Optional, Protocol

from ..basics.base_component import FULL
from ..components import COMPONENT_REGISTRY
from ..components.base_host import hicache_ratio_size
from ..components.cache_view import ConfigView

WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")
TRANSFER_MODES = ("immediate", "held")
# the storage tier's backends this cache can build (storage.make_storage_backend)
STORAGE_BACKENDS = ("memory", "file")
STORAGE_FIELDS = ("backend", "path", "budget", "prefetch_policy", "prefetch_threshold", "prefetch_timeout_base",
                  "prefetch_timeout_per_page", "inject")
PREFETCH_POLICIES = ("best_effort", "wait_complete", "timeout")


class CacheShape(ConfigView, Protocol):
    """What these checks read of the cache's config (``CacheConfig``), beside what each
    component's host part reads of it for its default host pool size."""

    components: tuple[str, ...]


def host_components(components: Optional[Iterable[str]] = None) -> tuple[str, ...]:
    """Of ``components`` (default: every registered one), in their order: Full and
    those with a host part, i.e. the ones a host tier keeps copies of. Torch-free."""
    names = COMPONENT_REGISTRY if components is None else components
    return (FULL, *(c for c in names if c != FULL and COMPONENT_REGISTRY.host_part(c) is not None))


def host_size_field(component: str) -> str:
    """The hicache field sizing a component's host pool."""
    return "host_kv_size" if component == FULL else f"host_{component}_size"


@dataclasses.dataclass(frozen=True)
class HiCacheConfig:
    """The host tier (SGLang's HiCache). ``write_through``: a new leaf is backed up on
    its first hit (insert); ``write_through_selective``: on its second; ``write_back``:
    when device eviction would drop it. ``host_kv_size`` (tokens) defaults to SGLang's
    size for hicache_ratio 2: twice the device pool plus one page; ``host_sizes``: each
    other component's host pool (``host_<name>_size``, default its host part's). A match
    whose host part is shorter than ``load_back_threshold`` tokens is not loaded back
    (SGLang's default 10). ``transfers``: ``immediate`` completes every copy within its
    op (SGLang on the CPU, polled every step); ``held`` keeps each write-through backup
    and each load-back in flight — its node locked — until a ``flush`` (SGLang's
    ``check_hicache_events``), as a GPU stream would. ``storage``: the storage tier
    (SGLang's L3, ``StorageConfig``) each backed-up node is written to after its ack."""

    write_policy: str = "write_through"
    host_kv_size: Optional[int] = None
    load_back_threshold: int = 10
    transfers: str = "immediate"
    host_sizes: Mapping[str, int] = dataclasses.field(default_factory=dict, hash=False)
    storage: Optional[StorageConfig] = None  # the storage tier below the host (None: none)

    @property
    def write_through_threshold(self) -> Optional[int]:
        """Hits before an insert backs a node up (None: only eviction does)."""
        return {"write_through": 1, "write_through_selective": 2}.get(self.write_policy)

    @classmethod
    def of(cls, fields: Mapping[str, Any] | HiCacheConfig, cache: CacheShape) -> HiCacheConfig:
        from ..components import COMPONENT_REGISTRY

        if isinstance(fields, HiCacheConfig):
            return fields
        if not isinstance(fields, Mapping):
            raise ValueError("hicache must be a table of write_policy, host_kv_size, load_back_threshold")
        parts = host_components(cache.components)
        if len(parts) < len(cache.components):
            lacking = sorted(set(cache.components) - set(parts))
            raise ValueError(f"hicache needs a host part of every component ({', '.join(lacking)} has none)")
        own = [f.name for f in dataclasses.fields(cls) if f.name != "host_sizes"]
        sized = {host_size_field(c): c for c in parts}
        anywhere = {host_size_field(c): c for c in host_components()}
        for key in fields:
            if key not in own and key not in sized:
                if key in anywhere:
                    raise ValueError(f"hicache {key} needs the {anywhere[key]} component")
                raise ValueError(f"unknown hicache field {key!r}; known: {', '.join(own + list(sized))}")
        config = cls(**{k: v for k, v in fields.items() if k in own})
        if config.write_policy not in WRITE_POLICIES:
            raise ValueError(f"hicache write_policy must be one of {', '.join(WRITE_POLICIES)} (got {config.write_policy!r})")
        if config.transfers not in TRANSFER_MODES:
            raise ValueError(f"hicache transfers must be one of {', '.join(TRANSFER_MODES)} (got {config.transfers!r})")
        sizes = {}
        for field, name in sized.items():
            part = None if name == FULL else COMPONENT_REGISTRY.host_part(name)
            page = cache.page_size if part is None or part.host_paged else None
            default = hicache_ratio_size(cache.kv_size, page) if part is None else part.default_host_size(cache)
            sizes[name] = _host_size(field, default if fields.get(field) is None else fields[field], page)
        threshold = config.load_back_threshold
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 0:
            raise ValueError(f"hicache load_back_threshold must be a non-negative int (got {threshold!r})")
        storage = None if config.storage is None else StorageConfig.of(config.storage, cache)
        return dataclasses.replace(config, host_kv_size=sizes.pop(FULL), host_sizes=sizes, storage=storage)




@dataclasses.dataclass(frozen=True)
class StorageConfig:
    """The storage tier (SGLang's ``--hicache-storage-backend``): after a host
    backup's ack each node's pages are written there by their hash (``backend``:
    ``memory`` or ``file``; ``path``: the file backend's directory, one it creates
    and marks (backends/owned_dir.py), a private temporary one when not given (the
    workbench replaces a scenario's: storage_place.py); ``budget``: a byte cap with
    LRU eviction), and a prefetch reads them back into host slots. ``prefetch_policy``: what the admission
    poll does with a prefetch still in flight (SGLang's
    ``--hicache-storage-prefetch-policy``); ``prefetch_threshold``: the fewest tokens
    worth a prefetch (SGLang's default 256); ``prefetch_timeout_base`` and
    ``prefetch_timeout_per_page``: the timeout policy's wait, in flushes (SGLang's
    seconds). ``inject``: scripted backend failures and delays (backends/injector.py),
    a list of rule tables such as ``{ call = "get", outcome = "fail", nth_page = 3 }``.
    Full KV, SWA and Mamba (their trailing pages, all or nothing), under EAGLE's bigram
    keys too (pages hashed as pairs); other components' data is not stored yet."""

    backend: str = "memory"
    path: Optional[str] = None
    budget: Optional[int] = None
    prefetch_policy: str = "best_effort"
    prefetch_threshold: int = 256
    prefetch_timeout_base: int = 1
    prefetch_timeout_per_page: float = 0.0
    inject: tuple = ()  # the rule tables, each as sorted (field, value) pairs (hashable)

    @classmethod
    def of(cls, fields: Mapping[str, Any] | StorageConfig, cache: CacheShape) -> StorageConfig:
        if isinstance(fields, StorageConfig):
            return fields
        if not isinstance(fields, Mapping):
            raise ValueError(f"hicache storage must be a table of {', '.join(STORAGE_FIELDS)} (got {fields!r})")
        unknown = [key for key in fields if key not in STORAGE_FIELDS]
        if unknown:
            raise ValueError(f"unknown hicache storage field {unknown[0]!r}; known: {', '.join(STORAGE_FIELDS)}")
        stored = COMPONENT_REGISTRY.stored_components()  # what the storage tier keeps (staging.py)
        others = [c for c in cache.components if c not in stored]
        if others:
            raise ValueError(f"hicache storage stores {', '.join(stored)} so far: storing "
                             f"{', '.join(others)} is not supported yet")
        rules = fields.get("inject", ())
        if not isinstance(rules, (list, tuple)) or not all(isinstance(r, Mapping) for r in rules):
            raise ValueError(f"hicache storage inject must be a list of rule tables (got {rules!r})")
        from .backends.injector import Rule

        for rule in rules:
            try:
                parsed = Rule.from_dict(dict(rule))
            except (TypeError, ValueError) as exc:
                raise ValueError(f"hicache storage inject: {exc}") from None
            if parsed.outcome == "delay" and parsed.call == "set":
                raise ValueError("hicache storage inject: a delay holds a prefetch's exists or get; a store's set "
                                 "is not delayed yet (script a set failure instead)")
        fields = {**fields, "inject": tuple(tuple(sorted(dict(r).items())) for r in rules)}
        config = cls(**fields)
        if config.backend not in STORAGE_BACKENDS:
            raise ValueError(f"hicache storage backend must be one of {', '.join(STORAGE_BACKENDS)} "
                             f"(got {config.backend!r})")
        if config.path is not None and (not isinstance(config.path, str) or not config.path):
            raise ValueError(f"hicache storage path must be a non-empty string (got {config.path!r})")
        if config.path is not None and config.backend == "memory":
            raise ValueError("hicache storage path is the file backend's directory: the memory backend takes none")
        budget = config.budget
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0):
            raise ValueError(f"hicache storage budget must be a positive int of bytes (got {budget!r})")
        if config.prefetch_policy not in PREFETCH_POLICIES:
            raise ValueError(f"hicache storage prefetch_policy must be one of {', '.join(PREFETCH_POLICIES)} "
                             f"(got {config.prefetch_policy!r})")
        for name in ("prefetch_threshold", "prefetch_timeout_base"):
            value = getattr(config, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"hicache storage {name} must be a non-negative int (got {value!r})")
        per_page = config.prefetch_timeout_per_page
        if isinstance(per_page, bool) or not isinstance(per_page, (int, float)) or not 0 <= per_page < 1e9:
            raise ValueError(f"hicache storage prefetch_timeout_per_page must be a non-negative number (got {per_page!r})")
        return config


def _host_size(field: str, size, page: Optional[int]) -> int:
    """A host pool's size: a positive multiple of ``page`` (None: a positive int, one
    slot per unit)."""
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0 or size % (page or 1):
        what = "a positive int" if page is None else f"a positive multiple of page_size {page}"
        raise ValueError(f"hicache {field} must be {what} (got {size!r})")
    bound = COMPONENT_REGISTRY.size_bound(field)
    if size > bound:
        raise ValueError(f"hicache {field} {size} is larger than this workbench supports ({bound:,}: "
                         "its pools are allocated whole)")
    return size
