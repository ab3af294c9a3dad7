"""What a fuzz run is set up with, apart from the machinery that runs it: light to
import, so ``urc fuzz`` checks its options before torch is loaded."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional

from cache.config.reference import inert

from ..ops.spec import BASE, fact, stateful, windowed


# FuzzConfig.delayed: every hit query waits 2 flushes
DELAY_RULE = {"call": "exists", "outcome": "delay", "steps": 2, "times": 1_000_000}


@dataclasses.dataclass(frozen=True)
class FuzzConfig:
    components: tuple[str, ...] = (BASE,)
    page_size: int = 1
    sliding_window: int = 4
    kv_size: Optional[int] = None  # tokens; default 48 pages: eviction runs often
    swa_kv_size: Optional[int] = None  # default 3/4 of kv_size
    mamba_size: Optional[int] = None  # default 6 states
    faults: tuple[str, ...] = ()
    hicache: Optional[str] = None  # a write policy: the host tier is on, and the host ops are drawn
    sessions: bool = False  # the session radix cache is on, and the session ops are drawn
    storage: Optional[str] = None  # a prefetch stop policy: a storage tier below the host tier, its ops drawn
    # storage hit queries delayed (each by 2 flushes: an injector rule), so prefetches
    # live across steps and the admission poll can find them unfinished
    delayed: bool = False
    # 0.5.23's model options ([config] fields: eviction_policy, mamba_max_states_per_path, …), as
    # sorted (name, value) pairs so the config stays hashable; see options.py for the sweep
    options: tuple[tuple[str, Any], ...] = ()

    def with_options(self, options: dict[str, Any]) -> FuzzConfig:
        merged = {**dict(self.options), **{name: frozen(value) for name, value in options.items()}}
        return dataclasses.replace(self, options=tuple(sorted(merged.items())))

    def option(self, name: str, default: Any = None) -> Any:
        return dict(self.options).get(name, default)

    def scenario_config(self, faults: Optional[tuple[str, ...]] = None) -> dict[str, Any]:
        page = self.page_size
        kv = self.kv_size or 48 * page
        config: dict[str, Any] = {"components": list(self.components), "page_size": page, "kv_size": kv}
        if windowed(self.components):
            config["sliding_window"] = self.sliding_window
            config["swa_kv_size"] = self.swa_kv_size or max(page, kv * 3 // 4 // page * page)
        if stateful(self.components):
            config["mamba_size"] = self.mamba_size or 4
        faults = self.faults if faults is None else faults
        if faults:
            config["faults"] = list(faults)
        if self.hicache:  # host pools of SGLang's default sizes, so a run replays against SGLang's too
            config["hicache"] = {"write_policy": self.hicache, "load_back_threshold": 2}
            if self.storage:  # a one-page threshold: a page is worth a prefetch
                config["hicache"]["storage"] = {"backend": "memory", "prefetch_policy": self.storage,
                                                "prefetch_threshold": page}
                if self.delayed:
                    config["hicache"]["storage"]["inject"] = [dict(DELAY_RULE)]
        if self.sessions:
            config["session_radix_cache"] = True
        config.update((name, _plain(value)) for name, value in self.options)
        return config

    def longest_prompt(self) -> int:
        """The most tokens a drawn key holds: 16 pages and a window."""
        return 16 * self.page_size + self.sliding_window

    def label(self) -> str:
        comps = "+".join(fact(c, "DISPLAY_NAME", c.capitalize()) for c in self.components)
        window = f" w{self.sliding_window}" if windowed(self.components) else ""
        host = f" {self.hicache}" if self.hicache else ""
        sessions = " sessions" if self.sessions else ""
        sessions += f" storage {self.storage}" if self.storage else ""
        sessions += " delayed" if self.delayed else ""
        options = "".join(f" {name}={shown_value(value)}" for name, value in self.options
                          if not inert(name, self.components))  # named as the cache runs
        pools = ""
        if self.kv_size:  # a swept pool size (sweep.py's twins): said, so two twins read apart
            pools = f" kv{self.kv_size}" + (f" swa_kv{self.swa_kv_size}" if self.swa_kv_size else "")
            pools += f" mamba{self.mamba_size}" if self.mamba_size else ""
        return f"{comps} p{self.page_size}{window}{pools}{host}{sessions}{options}"


MAX_SEED = 2**63 - 1
MAX_SEEDS = 1_000_000
MAX_EPISODES = 1_000_000  # a campaign's plan is held whole (~130 bytes an episode) before the first one runs


def check_plan(seed: int, seeds: int, configs: int = 0, episodes: int = 0) -> None:
    """Refuse, before anything is planned, seeds and episode counts no run could get
    through (``episodes``: per config and seed): ``--seeds 10**30`` planned every seed
    up front and took 8.8 GB."""
    from ..scenarios.errors import ScenarioError, shown
    from ..timeline.fmt import plural

    if seeds > MAX_SEEDS:
        raise ScenarioError(f"--seeds must be at most {MAX_SEEDS:,} (got {shown(seeds)})")
    if not 0 <= seed <= MAX_SEED + 1 - seeds:
        raise ScenarioError(f"--seed must be between 0 and {MAX_SEED + 1 - seeds:,}, so that every seed is below "
                            f"2**63 (got {shown(seed)})")
    if configs * seeds * episodes > MAX_EPISODES:
        sizes = f"{plural(configs, 'config')} x {plural(seeds, 'seed')} x {shown(episodes)} each"
        raise ScenarioError(f"the run would plan {shown(configs * seeds * episodes)} episodes ({sizes}), more than the "
                            f"{MAX_EPISODES:,} one run plans: give fewer --seeds or --steps")


def default_jobs() -> int:
    """The cores this process may run on (``urc fuzz --jobs`` is capped at them)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def frozen(value: Any) -> Any:
    """A table value as sorted (key, value) pairs: hashable, and one spelling per table."""
    return tuple(sorted((k, frozen(v)) for k, v in value.items())) if isinstance(value, dict) else value


def _plain(value: Any) -> Any:
    """An option value as a scenario's [config] holds it (tables back to dicts)."""
    return {k: _plain(v) for k, v in value} if isinstance(value, tuple) else value


def shown_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return "{" + ",".join(f"{k}={shown_value(v)}" for k, v in value) + "}"
    return str(value)
