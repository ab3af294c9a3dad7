"""The benchmark workload as a schema-1 trace (``urc bench --write-trace``), so anyone
can reproduce the timeline figures — and time SGLang on the very same file
(``../shared/oracle/trace_timer.py`` reads it too).

Per request: match -> lock -> insert -> unlock, with ``auto_evict`` making room.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any, TextIO

from ..ops.evict import CHECK, EVICT
from ..ops.keys import INSERT, MATCH
from ..ops.locks import LOCK, UNLOCK
from ..ops.requests import DECODE, PREFILL, RELEASE
from ..ops.spec import BASE, stateful, windowed

VOCAB = 32000
RECENT = 64  # a repeated request is one of the last RECENT requests


def build_workload(requests: int, seed: int = 0, prompts: int = 8, min_len: int = 64, max_len: int = 2048,
                   page_size: int = 1, repeat: float = 0.0) -> list[list[int]]:
    """Shared prompts (64..1024 tokens, Zipf-weighted) plus random suffixes. ``repeat``:
    the share of requests that repeat one of the last ``RECENT`` whole (a retry, a
    conversation sent again), so matches hit past the shared prompt; at 0 no draw is made
    for it and the workload is the one SGLang's bench generates."""
    rng = random.Random(seed)
    shared = []
    for _ in range(prompts):
        n = rng.randint(64, 1024) // page_size * page_size or page_size
        shared.append([rng.randrange(1, VOCAB) for _ in range(n)])
    weights = [1.0 / (i + 1) for i in range(len(shared))]
    out = []
    for _ in range(requests):
        if repeat and out and rng.random() < repeat:
            out.append(rng.choice(out[-RECENT:]))
            continue
        prompt = rng.choices(shared, weights=weights)[0]
        total = rng.randint(min_len, max_len)
        out.append(prompt + [rng.randrange(1, VOCAB) for _ in range(max(1, total - len(prompt)))])
    return out


def trace_config(components: tuple[str, ...], kv_size: int = 65536, sliding_window: int = 128,
                 mamba_size: int = 256) -> dict[str, Any]:
    config: dict[str, Any] = {"components": list(components), "page_size": 1, "kv_size": kv_size,
                              "auto_evict": True, "device": "cpu"}
    if windowed(components):
        config.update(sliding_window=sliding_window, swa_kv_size=kv_size)
    if stateful(components):
        config["mamba_size"] = mamba_size
    return config


def trace_records(requests: int, seed: int = 0, components: tuple[str, ...] = (BASE,),
                  repeat: float = 0.0) -> Iterator[dict[str, Any]]:
    """The header, then four steps per request."""
    name = f"bench-{','.join(components)}-{requests}" + (f"-repeat-{repeat:g}" if repeat else "")
    yield {"schema": 1, "scenario": {"name": name, "description": "urc bench --write-trace workload"},
           "config": trace_config(components)}
    for i, key in enumerate(build_workload(requests, seed, repeat=repeat)):
        yield MATCH.step(key=key, as_=f"m{i}")
        yield LOCK.step(match=f"m{i}", as_=f"L{i}")
        yield INSERT.step(key=key)
        yield UNLOCK.step(lock=f"L{i}")


def write_trace(stream: TextIO, requests: int, seed: int = 0, components: tuple[str, ...] = (BASE,),
                repeat: float = 0.0) -> int:
    """Write the trace; returns the number of steps."""
    steps = -1
    for record in trace_records(requests, seed, components, repeat):
        stream.write(json.dumps(record, separators=(",", ":")) + "\n")
        steps += 1
    return steps


def random_records(steps: int, seed: int = 0, components: tuple[str, ...] = (BASE,)) -> Iterator[dict[str, Any]]:
    """A fuzzer-like trace: small keys over a 4-token alphabet (so prefixes collide and
    nodes split), matches, locks and unlocks on live names, evictions, and requests
    that prefill, decode and finish; the pools are small so eviction runs often."""
    rng = random.Random(seed)
    config: dict[str, Any] = {"components": list(components), "page_size": 1, "kv_size": 256}
    if windowed(components):
        config.update(sliding_window=4, swa_kv_size=192)
    if stateful(components):
        config["mamba_size"] = 24
    yield {"schema": 1, "scenario": {"name": f"random-{steps}-{seed}"}, "config": config}
    held: list[str] = []
    running: list[str] = []

    def key(lo: int = 1, hi: int = 12) -> list[int]:
        return [rng.randint(1, 4) for _ in range(rng.randint(lo, hi))]

    for i in range(steps):
        roll = rng.random()
        if roll < 0.3:
            yield INSERT.step(key=key())
        elif roll < 0.55:
            yield MATCH.step(key=key(0), as_=f"m{i}")
            if len(held) < 8 and rng.random() < 0.4:  # lock at once: a later lock could find its node evicted
                held.append(f"l{i}")
                yield LOCK.step(match=f"m{i}", as_=f"l{i}")
        elif roll < 0.7 and held:
            yield UNLOCK.step(lock=held.pop(rng.randrange(len(held))))
        elif roll < 0.76:
            yield EVICT.step(**{c: rng.randint(1, 8) for c in components})
        elif roll < 0.84 and len(running) < 4:
            running.append(f"r{i}")
            yield PREFILL.step(req=f"r{i}", tokens=key())
        elif roll < 0.93 and running:
            step = DECODE.step(req=rng.choice(running), tokens=key(1, 4))
            if windowed(components) and rng.random() < 0.5:
                step["slide_window"] = True
            yield step
        elif running:
            yield RELEASE.step(req=running.pop(rng.randrange(len(running))))
        else:
            yield CHECK.step()
