"""Every [config] field a scenario can give, with its default and the model family or
deployment that turns it on in SGLang 0.5.23: the docs' config reference (docs/reference/config.md) and the
config line every view and picture opens with are made from this table.

Data only (no torch): ``urc`` reads it before a cache is built. A test checks it
against ``CacheConfig``, ``HiCacheConfig`` and every component's ``config_fields``, so
a new field cannot go unlisted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..basics.base_component import FULL
from ..basics.limits import MAX_POOL, MAX_STATES
from ..components import COMPONENT_REGISTRY
from ..tree.leaf_policies import POLICIES

REQUIRED = object()  # a field with no default


@dataclasses.dataclass(frozen=True)
class ConfigOption:
    name: str
    default: Any  # REQUIRED, or the value an absent field means
    shown_default: str  # the default as the reference prints it
    family: str  # who turns it on: a model family, a server flag, or "every model"
    meaning: str
    model_option: bool = False  # one of 0.5.23's per-model options: named in the config line when not default


def _opt(name, default, shown, family, meaning, model_option=False) -> ConfigOption:
    return ConfigOption(name, default, shown, family, meaning, model_option)


OPTIONS: tuple[ConfigOption, ...] = (
    _opt("components", REQUIRED, "required", "every model",
         '`["full"]`, `["full", "swa"]`, `["full", "mamba"]`, all three, or with a registered component; `full` first'),
    _opt("kv_size", REQUIRED, "required", "every model", f"Full KV pool, in tokens (a multiple of `page_size`; at most "
         f"{MAX_POOL:,}: pools are allocated whole)"),
    _opt("page_size", 1, "1", "`--page-size`", "tokens per page: keys are cached page-aligned, allocations are whole pages"),
    _opt("sliding_window", REQUIRED, "required with `swa`", "SWA models (gpt-oss, Gemma 2/3, Llama 4, DeepSeek-V4)",
         "the attention window, in tokens"),
    _opt("swa_kv_size", None, "`kv_size`", "SWA models", f"SWA KV pool, in tokens (at most {MAX_POOL:,})"),
    _opt("mamba_size", REQUIRED, "required with `mamba`", "hybrid Mamba/linear-attention models (Qwen3-Next, "
         "Qwen3.5, Nemotron-H, Falcon-H1)", f"Mamba state slots (at most {MAX_STATES:,})"),
    _opt("device", "auto", '`"auto"`', "this workbench", "where the pools live: `auto` (CUDA when present), `cpu`, `cuda`"),
    _opt("auto_evict", True, "`true`", "this workbench", "an op that needs slots first evicts the shortfall (SGLang's "
         "`evict_for_alloc`); `false`: it is refused"),
    _opt("faults", (), "`[]`", "this workbench", "fault names from the catalogue (`urc fuzz --list-faults`) that "
         "re-introduce upstream bugs", model_option=True),
    _opt("session_radix_cache", False, "`false`", "`--enable-session-radix-cache`",
         "finished session requests tag their KV so eviction spares it (see Sessions)", model_option=True),
    _opt("enable_kv_cache_events", False, "`false`", "`--kv-events-config`", "the tree records SGLang's KV events "
         "(BlockStored, BlockRemoved, AllBlocksCleared on GPU and CPU_PINNED) and every step checks a router's "
         "replay of them against the cache (see KV events)"),
    _opt("hicache", None, "none", "`--enable-hierarchical-cache`",
         "the host tier: a table of the `hicache.*` fields below", model_option=True),
    _opt("hicache.write_policy", "write_through", '`"write_through"`', "`--hicache-write-policy`",
         "`write_through`, `write_through_selective` (backed up on the second hit) or `write_back` (on eviction)"),
    _opt("hicache.host_kv_size", None, "twice `kv_size` plus a page", "`--hicache-ratio` / `--hicache-size`",
         f"Full KV's host pool, in tokens (at most {COMPONENT_REGISTRY.size_bound('host_kv_size'):,})"),
    _opt("hicache.host_<component>_size", None, "its host part's", "`--hicache-ratio`",
         f"each other component's host pool (`host_swa_size`, `host_mamba_size`, …; at most "
         f"{COMPONENT_REGISTRY.size_bound('host_swa_size'):,}, `host_mamba_size` "
         f"{COMPONENT_REGISTRY.size_bound('host_mamba_size'):,})"),
    _opt("hicache.load_back_threshold", 10, "10", "`--hicache-load-back-threshold`",
         "a match whose host part is shorter is not loaded back"),
    _opt("hicache.transfers", "immediate", '`"immediate"`', "this workbench", "`immediate` completes each copy in its "
         "op (SGLang on the CPU); `held` keeps it in flight until a `flush`, as a GPU stream would"),
    _opt("hicache.storage", None, "none", "`--hicache-storage-backend`", "the storage tier (L3) below the host: "
         "a table of the `hicache.storage.*` fields below; each backed-up node's pages are written there after the "
         "backup's ack, by page hash (SWA's host window and Mamba's state under a node's last hashes), and a "
         "`prefetch` reads them back into host slots, SWA and Mamba all or nothing (other components are not stored yet)"),
    _opt("hicache.storage.backend", "memory", '`"memory"`', "`--hicache-storage-backend`",
         "where pages go: `memory` (a dict) or `file` (one crash-safe file per page, as SGLang's `file` backend)"),
    _opt("hicache.storage.path", None, "a private temporary directory", "`--file-storage-path`",
         "the file backend's directory, one it created and marked (it removes files there that fail their check); "
         "in a scenario file it is ignored: `--storage-dir DIR` names it"),
    _opt("hicache.storage.budget", None, "none", "`max_size` in `--hicache-storage-backend-extra-config`",
         "a byte cap on stored pages, evicting least recently used ones to 90 % of it when full"),
    _opt("hicache.storage.prefetch_policy", "best_effort", '`"best_effort"`', "`--hicache-storage-prefetch-policy`",
         "what the admission poll does with a prefetch in flight: `best_effort` takes what has arrived, "
         "`wait_complete` waits for all of it, `timeout` waits until its deadline"),
    _opt("hicache.storage.prefetch_threshold", 256, "256", "`prefetch_threshold` in `--hicache-storage-backend-extra-config`",
         "the fewest tokens worth a prefetch (a shorter span or storage hit is not fetched)"),
    _opt("hicache.storage.prefetch_timeout_base", 1, "1", "`prefetch_timeout_base` in the extra config (seconds)",
         "the `timeout` policy's wait, in flushes counted from the first poll that found the prefetch unfinished"),
    _opt("hicache.storage.prefetch_timeout_per_page", 0.0, "0", "`prefetch_timeout_per_page` in the extra config",
         "flushes more per page requested"),
    _opt("hicache.storage.inject", (), "none", "`SGLANG_TEST_HICACHE_BACKEND_RANDOM_FAILURE` / `_DELAY` (random there)",
         "scripted backend outcomes, a list of rules: `{ call = \"get\", outcome = \"fail\", nth_page = 3 }`; "
         "`call` set, get or exists; `outcome` fail or delay (`steps` flushes: a prefetch's query or read waits); "
         "keys by `prefix`, `nth_call` or `nth_page`; `times` (1)"),
    _opt("eviction_policy", "lru", '`"lru"`', "`--radix-eviction-policy`", "the order Full's device and host leaves "
         f"are evicted in: {', '.join(f'`{name}`' for name in POLICIES)} (SWA and Mamba stay LRU)",
         model_option=True),
    _opt("eviction_policy_config", None, "none", "`--radix-eviction-policy-config`", "the policy's parameters: "
         "`slru` `protected_threshold` (2); `tlru` `threshold`, `next_prompt_estimate` (0, 0)", model_option=True),
    _opt("is_eagle", False, "`false`", "EAGLE / EAGLE3 / MTP speculative decoding (`--speculative-algorithm EAGLE`)",
         "keys are token pairs (bigrams): N + 1 tokens make a key of N; off with Mamba", model_option=True),
    _opt("swa_draft_window", 0, "0", "DeepSeek-V4 with a draft model's window", "SWA keeps max(`sliding_window`, "
         "this) tokens: matches, locks and frees use the wider retain window", model_option=True),
    _opt("swa_gates_prefix_match", True, "`true`", "`false`: per-request SWA rings, DeepSeek-V4 request windows",
         "`false`: a SWA tombstone over live Full KV does not end a match", model_option=True),
    _opt("swa_free_out_of_window", True, "`true`", "`SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS`",
         "a running request frees its SWA slots that slid out of the window as it goes", model_option=True),
    _opt("mamba_max_states_per_path", -1, "-1 (off)", "`--mamba-max-states-per-path` (Qwen3-Next, Qwen3.5 long "
         "context)", "after an insert, at most this many Mamba states stay on its root-to-tail path (the tail, "
         "locked nodes, forks and device leaves are spared)", model_option=True),
    _opt("mamba_extra_buffer", None, "`page_size > 1`", "`--mamba-scheduler-strategy extra_buffer`",
         "a request keeps a ping-pong pair of states to checkpoint from; required above page 1, allowed at page 1",
         model_option=True),
    _opt("mamba_skip_decode_lock", False, "`false`", "`SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK`",
         "a decoding request's checkpoint re-locks its node without Mamba's lock", model_option=True),
)

BY_NAME = {option.name: option for option in OPTIONS}
# the top-level [config] fields (not hicache's own, which are a table's)
FIELD_NAMES = tuple(option.name for option in OPTIONS if "." not in option.name)


def did_you_mean(name: str, names=FIELD_NAMES) -> str:
    """`` (did you mean 'x'?)`` naming the fields close to a misspelt one, or nothing."""
    import difflib

    close = difflib.get_close_matches(str(name), list(names), n=2)
    return f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""


def inert(name: str, components) -> bool:
    """An option the cache ignores with these components (``is_eagle`` with Mamba, see
    ``CacheConfig.bigram_keys``): the config line leaves it out, as the cache runs without it."""
    return name in COMPONENT_REGISTRY.turned_off(c for c in components if c in COMPONENT_REGISTRY)


def component_options() -> tuple[ConfigOption, ...]:
    """The fields registered components document themselves (``config_docs``): a new
    component lists its own fields without a line here. Loads the component classes."""
    from ..components import COMPONENT_REGISTRY

    out = []
    for name in COMPONENT_REGISTRY:
        component = COMPONENT_REGISTRY[name]
        for field, (shown, family, meaning) in component.config_docs.items():
            if field not in BY_NAME:
                default = component.config_fields[field]
                out.append(ConfigOption(field, REQUIRED if default is None else default, shown, family, meaning, True))
    return tuple(out)


def reference_table() -> str:
    """The config reference table (docs/reference/config.md, made by tools/gen_reference.py)."""
    rows = ["| field | default | turned on by | meaning |", "|---|---|---|---|"]
    rows += [f"| `{o.name}` | {o.shown_default} | {o.family} | {o.meaning} |" for o in OPTIONS + component_options()]
    return "\n".join(rows)


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}={_shown(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def config_line(config: Mapping[str, Any]) -> str:
    """One line naming the cache a scenario builds: its components, page, window and
    every model option it sets away from the default ("full+swa · page 4 · window 4 ·
    eviction_policy=lfu")."""
    parts = ["+".join(config.get("components", (FULL,))), f"page {config.get('page_size', 1)}"]
    if config.get("sliding_window") is not None:
        parts.append(f"window {config['sliding_window']}")
    for option in OPTIONS:
        if inert(option.name, config.get("components", ())):
            continue
        if option.model_option and option.name in config and config[option.name] not in (option.default, None, (), []):
            value = config[option.name]
            if option.name == "hicache":
                parts.append(f"hicache {value.get('write_policy', 'write_through') if isinstance(value, Mapping) else ''}".strip())
                storage = value.get("storage") if isinstance(value, Mapping) else None
                if isinstance(storage, Mapping):  # the storage tier below it
                    parts.append(f"storage {storage.get('backend', 'memory')}")
            elif option.name == "session_radix_cache":
                parts.append("session radix cache")
            else:
                parts.append(f"{option.name}={_shown(value)}")
    components = config.get("components", ())  # fields a component documents itself, as given
    parts += [f"{name}={_shown(value)}" for name, value in config.items()
              if name not in BY_NAME and any(name.startswith(f"{c}_") for c in components if c != FULL)]
    return " · ".join(parts)
