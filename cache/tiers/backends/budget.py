"""A storage backend's byte budget: LRU bookkeeping that both backends share.

It follows SGLang 0.5.23's ``LRUFileEvictor`` (storage/file/lru_file_evictor.py) so a
budgeted store keeps the same pages SGLang's file backend keeps:
- a page bigger than the budget is refused outright;
- when a new page would take the total over the budget, least-recently-used pages go
  until ``total <= int(budget * ratio) - needed`` (a watermark: one overflow frees about
  ``1 - ratio`` of the budget at once, not one page), and if the total plus the page is
  still over the budget the page is refused;
- a reserved page is "pending" (its write has not landed) and eviction skips it, moving
  it to the most recent end, as SGLang's does for an in-flight write;
- a read hit or a ``set`` of a stored key makes the page the most recent.

What counts: the page's payload bytes (``len(page)``), which is what SGLang counts (its
``.bin`` file is the raw page). The file backend's per-file header is not counted, so the
same budget keeps the same number of pages in SGLang's store, ours on disk and ours in
memory. Without a budget nothing is ever evicted, but the order is still kept (views
show it).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Optional

DEFAULT_EVICTION_RATIO = 0.9  # SGLang's eviction_ratio default


def _drop_nothing(key: str) -> None:
    return None


class LruBudget:
    """Pages' sizes, least recently used first; evicts through ``drop`` when over budget.

    ``drop(key)`` removes the page from the backend; raising OSError keeps the page
    (it goes back to the least recent end) and stops that eviction, as SGLang does when
    an unlink fails.
    """

    def __init__(self, budget: Optional[int] = None, ratio: float = DEFAULT_EVICTION_RATIO,
                 drop: Callable[[str], None] = _drop_nothing) -> None:
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0):
            raise ValueError(f"budget must be a positive number of bytes or None (unlimited), not {budget!r}")
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0.0 < ratio <= 1.0:
            raise ValueError(f"eviction_ratio must be in (0, 1], not {ratio!r}")
        self.budget = budget
        self.ratio = float(ratio)
        self._drop = drop
        self._sizes: OrderedDict[str, int] = OrderedDict()
        self._pending: set[str] = set()
        self.total = 0  # counted bytes of every tracked page, pending ones included
        self.evicted = 0  # pages removed to make room
        self.refused = 0  # pages not admitted (too big, or no room even after evicting)

    def __contains__(self, key: str) -> bool:
        return key in self._sizes

    def __len__(self) -> int:
        return len(self._sizes)

    def order(self) -> list[str]:
        """Tracked keys, least recently used first (the next victim first)."""
        return list(self._sizes)

    def pending(self) -> set[str]:
        return set(self._pending)

    def adopt(self, key: str, size: int) -> None:
        """Track a page that is already stored (a restart's scan), as the most recent."""
        self.forget(key)
        self._sizes[key] = size
        self.total += size

    def settle(self) -> None:
        """After adopting a store bigger than the budget: evict down to the watermark."""
        if self.budget is not None and self.total > self.budget:
            self._evict(0)

    def touch(self, key: str) -> None:
        if key in self._sizes:
            self._sizes.move_to_end(key)

    def reserve(self, key: str, size: int) -> bool:
        """Admit a new page of ``size`` bytes, evicting if needed; False = refused."""
        if self.budget is not None:
            if size > self.budget:
                self.refused += 1
                return False
            if self.total + size > self.budget:
                self._evict(size)
                if self.total + size > self.budget:
                    self.refused += 1
                    return False
        self.forget(key)  # a stale entry for a page that went missing is replaced
        self._sizes[key] = size
        self.total += size
        self._pending.add(key)
        return True

    def commit(self, key: str) -> None:
        """The reserved page's write landed: it may be evicted from now on."""
        self._pending.discard(key)

    def abort(self, key: str) -> None:
        """The reserved page's write failed: give its bytes back."""
        self.forget(key)

    def forget(self, key: str) -> None:
        """The page is gone (a failed read, a removed file): stop counting it."""
        size = self._sizes.pop(key, None)
        self._pending.discard(key)
        if size is not None:
            self.total -= size

    def clear(self) -> None:
        self._sizes.clear()
        self._pending.clear()
        self.total = 0

    def _evict(self, needed: int) -> None:
        """Evict least-recent pages until ``total <= int(budget * ratio) - needed``.

        Pending pages are skipped (moved to the recent end); the skip allowance resets
        after each eviction so the loop ends once only pending pages are left."""
        target = max(0, int(self.budget * self.ratio) - needed)
        skips_left = len(self._sizes)
        while self._sizes and skips_left > 0 and self.total > target:
            key, size = self._sizes.popitem(last=False)
            if key in self._pending:
                self._sizes[key] = size
                skips_left -= 1
                continue
            try:
                self._drop(key)
            except OSError:
                self._sizes[key] = size
                self._sizes.move_to_end(key, last=False)
                return
            self.total -= size
            self.evicted += 1
            skips_left = len(self._sizes)

    def stats(self) -> dict:
        return {"pages": len(self._sizes), "bytes": self.total, "budget": self.budget,
                "eviction_ratio": self.ratio, "evicted": self.evicted, "refused": self.refused}
