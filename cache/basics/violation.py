"""A named invariant violation: what the checker returns, the timeline records and a
stored run keeps. Its own module, free of torch, so reading a stored run (which
unpickles these) never imports the cache's tensor code."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Violation:
    name: str  # stable identifier, e.g. "counter.evictable"
    message: str

    def __str__(self) -> str:
        return f"{self.name}: {self.message}"
