"""Generated op sequences for ``urc fuzz``: every step one a scenario file could hold.

``OpGenerator`` keeps a model of the live names, so it draws inserts and matches over a
tiny token alphabet with shared prefixes (so keys collide and nodes split), locks,
unlocks and window releases on live handles, evictions per component, and request
flows (prefill, decode with window sliding, chunked and finished caching); each op's
own draw is its declaration's fuzz rule (``ops/``). It is deterministic for a seed.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterator
from typing import Any

from .. import ops
from .config import FuzzConfig


class OpGenerator:
    """Infinite valid steps for one config; ``next_step()`` is deterministic per seed."""

    def __init__(self, config: FuzzConfig, seed: int | str) -> None:
        self.config = config
        self.rng = random.Random(seed)
        # cache_salt draws come from their own stream, so the steps are the ones the seed always drew
        self.salt_rng = random.Random(f"cache_salt:{seed}")
        # the priority policy's draws (ops/keys.py draw_priority) from their own stream, so a
        # policy row's ops are the default row's: the same workload, evicted its own way
        self.priority_rng = random.Random(f"{seed}:priority")
        self.page = config.page_size
        self.keys: list[list[int]] = []
        self.matches: list[str] = []
        self.held: list[str] = []
        self.released: list[str] = []
        self.running: list[str] = []
        self.chunked: set[str] = set()  # running requests whose prompt is not all computed yet
        self.computed: dict[str, int] = {}  # per request: tokens computed (when not chunked)
        self.outputs: dict[str, int] = {}  # per request: output tokens decoded
        self.undecoded: dict[str, int] = {}  # per request: of those, the tokens whose decode our cache refused
        self.output_cap: dict[str, int] = {}  # streaming turns with max_new_tokens: the cap (ops/requests.py)
        self.open_sessions: set[str] = set()  # sessions the steps so far opened and did not close
        self.streaming: set[str] = set()  # … of them, the streaming ones
        self.turn_of: dict[str, str] = {}  # streaming session -> its running turn
        self.turn_blocked: set[str] = set()  # sessions that rejected a turn while one runs (ops/streaming.py)
        self.prefetches: list[str] = []  # the latest prefetch ids drawn (ops/storage.py)
        self.count = 0
        self.last_rule = None  # the rule that drew the latest step (refused() asks it)
        # the draw's rules in rank order, sorted once: the registry does not change mid-episode
        self.rules = sorted((rule for spec in ops.all_ops() for rule in spec.fuzz), key=lambda rule: rule.rank)

    def key(self, min_len: int = 0) -> list[int]:
        rng, page = self.rng, self.page
        if self.keys and rng.random() < 0.6:  # share a prefix with an earlier key
            base = rng.choice(self.keys)
            cut = rng.randint(0, len(base))
            if rng.random() < 0.7:
                cut = cut // page * page
            key = base[:cut]
        else:
            key = []
        pages = rng.choice((0, 1, 1, 2, 2, 3, 4, 6, 8))
        key = key + [rng.randint(1, 3) for _ in range(pages * page + (rng.randrange(page) if rng.random() < 0.3 else 0))]
        key = key[: self.config.longest_prompt()]
        while len(key) < min_len:
            key.append(rng.randint(1, 3))
        if len(key) >= page:
            self.keys = (self.keys + [key])[-12:]
        return key

    def salt(self) -> dict[str, str]:
        """Now and then a cache_salt (a second namespace) for an insert, match or request."""
        if self.salt_rng.random() < 0.12:
            return {"cache_salt": self.salt_rng.choice(("s1", "s2"))}
        return {}

    def next_step(self) -> dict[str, Any]:
        """One weighted draw over every op's fuzz rules (``ops/``), then the rule's step."""
        self.count += 1
        rules = self.rules
        self.last_rule = self.rng.choices(rules, [rule.weight(self) for rule in rules])[0]
        return self.last_rule.make(self)

    def refused(self, step: dict[str, Any], running: Collection[str]) -> None:
        """Our cache refused ``step``, the last one drawn, leaving ``running`` the requests
        that run: its rule puts the model right."""
        if self.last_rule.refused is not None:
            self.last_rule.refused(self, step, running)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while True:
            yield self.next_step()
