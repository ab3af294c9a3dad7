"""A stored run's per-step columns read like the in-memory lists: a column of the
steps' file rows (``deltas``, ``befores``, ``globals``, the records) and its
keyframes, read in chunks, decoded once and kept in a bounded cache; the steps not
yet written come from the writer's batch."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any, Callable, Protocol

from .states import Records
from .store_file import CACHED_ROWS, StoreError, StoreFile
from .store_rows import packed_records

CACHE_COST = 48 << 20  # estimated bytes of decoded rows one column keeps (store_codec's estimate)


class ColumnSource(Protocol):
    """What a column reads of its store (``stored.DiskStateStore``)."""

    file: StoreFile
    pending: dict[int, dict[str, Any]]  # steps not yet written: column -> value
    pending_keyframes: list[tuple[int, Records]]

    def __len__(self) -> int: ...


class StoredColumn(Sequence):
    """One per-step column (``deltas``, ``befores``, ``globals``, the records) read
    like the in-memory lists: ``[i]``, ``[-1]``, slices, ``len``, iteration. Index 0 is
    the start; steps not yet written come from the writer's batch."""

    def __init__(self, store: ColumnSource, column: str, convert: Callable[[Any], Any], start: Any) -> None:
        self.store = store
        self.column = column
        self.convert = convert  # the decoded value as readers take it
        self.start = start
        self._cache: OrderedDict[int, tuple[Any, int]] = OrderedDict()  # index -> (value, its cost)
        self._cost = 0

    def __len__(self) -> int:
        return len(self.store) + 1

    def __getitem__(self, index):
        return sequence_item(index, len(self), self.between)

    def __iter__(self) -> Iterator:
        return self.between(0, len(self) - 1)

    def between(self, first: int, last: int, chunk: int = 256) -> Iterator:
        """Steps first..last, read from the file in chunks."""
        index = first
        while index <= last:
            if index == 0:
                yield self.start
                index += 1
                continue
            pending = self.store.pending.get(index)
            if pending is not None:
                yield pending[self.column]
                index += 1
                continue
            cached = self._cache.get(index)
            if cached is not None:
                self._cache.move_to_end(index)
                yield cached[0]
                index += 1
                continue
            top = min(last, index + chunk - 1)
            file = self.store.file
            rows = file.rows(self.column, index, top)
            if not rows or rows[0][0] != index:
                raise StoreError(f"damaged store: step {index} is missing", file.path)
            for i, blob in rows:
                value, cost = file.decode_costed(blob, f"step {i}'s {self.column}")
                value = self.convert(value)
                self._cache[i] = (value, cost)
                self._cost += cost
                while len(self._cache) > CACHED_ROWS or (self._cost > CACHE_COST and len(self._cache) > 1):
                    self._cost -= self._cache.popitem(last=False)[1][1]
                yield value
            index = rows[-1][0] + 1


def sequence_item(index, n: int, between: Callable[[int, int], Iterator]):
    """``seq[index]`` (an int, negative too, or a slice) of a sequence of ``n`` items
    that ``between(first, last)`` reads in order."""
    if isinstance(index, slice):
        first, stop, stride = index.indices(n)
        if stride != 1:
            return [sequence_item(i, n, between) for i in range(first, stop, stride)]
        return list(between(first, stop - 1)) if stop > first else []
    if index < 0:
        index += n
    if not 0 <= index < n:
        raise IndexError(index)
    return next(between(index, index))


class StoredKeyframes:
    """``keyframes[i]`` of the in-memory store, read from the file."""

    def __init__(self, store: ColumnSource) -> None:
        self.store = store

    def __getitem__(self, index: int) -> Records:
        kept, records = self.at_or_before(index)
        if kept != index:
            raise KeyError(index)
        return records

    def at_or_before(self, index: int) -> tuple[int, Records]:
        store = self.store
        for kept, records in reversed(store.pending_keyframes):
            if kept <= index:
                return kept, dict(records)
        file = store.file
        found = file.read("SELECT idx, records FROM keyframes WHERE idx <= ? ORDER BY idx DESC LIMIT 1", (index,),
                          f"the keyframe before step {index}")
        if not found or not isinstance(found[0][0], int):
            raise StoreError(f"damaged store: no keyframe at or before step {index}", file.path)
        kept, blob = found[0]
        return kept, file.unpack(packed_records(file.decode(blob, f"the keyframe at step {kept}"), file.path))
