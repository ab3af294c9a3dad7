"""A component whose data lives in a pool of its own (SWA, Mamba and others): the
pool answers the size questions the controller asks of every component."""

from __future__ import annotations


class OwnPoolMixin:
    """``self.pool`` is the component's pool: what is free, how large, emptied on reset."""

    pool: object

    def available_size(self) -> int:
        return self.pool.available_size()

    def pool_size(self) -> int:
        return self.pool.size

    def reset_pool(self) -> None:
        self.pool.clear()
