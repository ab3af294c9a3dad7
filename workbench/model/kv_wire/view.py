"""The consumer's view: what a router believes a server's cache holds, built from its
KV event batches alone, one block tree per medium (GPU, CPU_PINNED, DISK …).

Each block keeps its parent and its tokens; a batch becomes a ``BatchRecord`` (what it
added and removed on each medium, and the checks a consumer can make on its own):

- a removal of a block the view does not hold (``kv_events.unknown_block``, a router's
  "Failed to find block");
- a store whose parent the view holds on no medium (``kv_events.unknown_parent``: the
  chain is broken, prefix matches through it fail);
- a batch whose sequence number skips some (``kv_events.sequence_gap``: batches lost).

Memory is what the server holds plus a bounded window of recent batches, however long
the stream."""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import Optional

from cache.basics.violation import Violation
from cache.observe.kv_events import CPU, GPU

from ..timeline.fmt import kv_event_text

UNKNOWN_BLOCK = "kv_events.unknown_block"
UNKNOWN_PARENT = "kv_events.unknown_parent"
SEQUENCE_GAP = "kv_events.sequence_gap"
MEDIA = (GPU, CPU, "DISK", "EXTERNAL")  # SGLang's StorageMedium values, in tier order
RECENT = 1000  # batch records kept in memory
LINES = 8  # events in words kept per batch
_SHOWN = 4  # block ids named per violation


@dataclasses.dataclass(frozen=True)
class Block:
    parent: Optional[int]
    tokens: tuple


@dataclasses.dataclass(frozen=True)
class BatchRecord:
    seq: int
    ts: float
    events: int
    added: dict[str, int]  # medium -> blocks stored
    removed: dict[str, int]  # medium -> blocks removed
    cleared: bool
    violations: tuple[Violation, ...]
    first: tuple  # its first events (put in words only when shown)
    held: dict[str, int]  # medium -> blocks held after it

    @property
    def lines(self) -> tuple[str, ...]:
        return tuple(kv_event_text(_ours(e)) for e in self.first)

    @property
    def passed(self) -> bool:
        return not self.violations

    def summary(self) -> str:
        parts = [f"+{n} {m}" for m, n in self.added.items()] + [f"-{n} {m}" for m, n in self.removed.items()]
        if self.cleared:
            parts.append("all cleared")
        bad = f", {len(self.violations)} violation(s)" if self.violations else ""
        return f"batch {self.seq}: {self.events} event(s) {' '.join(parts) or 'no change'}{bad}"


class ConsumerView:
    def __init__(self, recent: int = RECENT) -> None:
        self.blocks: dict[str, dict[int, Block]] = {}
        self.expected: Optional[int] = None  # the next sequence number
        self.recent: deque[BatchRecord] = deque(maxlen=recent)
        self.batches = self.events = self.violations = 0
        self.problems: deque[str] = deque(maxlen=recent)  # malformed messages, lost connections, in one line each

    def held(self) -> dict[str, int]:
        """Blocks held per medium, in tier order."""
        return {m: len(self.blocks[m]) for m in _ordered(self.blocks) if self.blocks[m]}

    def apply(self, seq: int, ts: float, events) -> Optional[BatchRecord]:
        """Apply one batch, as wire structs or our cache's dataclasses (the same names
        and fields); None for a batch already applied (a replay overlapping what arrived
        live)."""
        if self.expected is not None and seq < self.expected:
            return None
        found: list[Violation] = []
        first = 0 if self.expected is None else self.expected
        if seq > first:
            found.append(Violation(SEQUENCE_GAP, f"batch {seq} arrived after batch {first - 1}: batches {first}"
                                                 f"..{seq - 1} ({seq - first}) never did, the view misses them"
                                   if first else f"batch {seq} is the first received: batches 0..{seq - 1} "
                                                 f"({seq}) never were, the view misses them"))
        self.expected = seq + 1
        added: dict[str, int] = {}
        removed: dict[str, int] = {}
        cleared = False
        for event in events:
            kind = type(event).__name__
            if kind == "BlockStored":
                self._store(event, added, found)
            elif kind == "BlockRemoved":
                self._remove(event, removed, found)
            elif kind == "AllBlocksCleared":
                cleared = True
                for held in self.blocks.values():
                    held.clear()
        record = BatchRecord(seq, ts, len(events), added, removed, cleared, tuple(found),
                             tuple(events[:LINES]), self.held())
        self.batches += 1
        self.events += len(events)
        self.violations += len(found)
        self.recent.append(record)
        return record

    def problem(self, text: str) -> None:
        """A message that could not be applied, kept as one line; the view stays as it was."""
        self.problems.append(text)

    def _store(self, event, added: dict, found: list) -> None:
        medium = event.medium or GPU
        held = self.blocks.setdefault(medium, {})
        parent = event.parent_block_hash
        if parent is not None and parent not in held and not self._anywhere(parent):
            found.append(Violation(UNKNOWN_PARENT, f"BlockStored({medium}) of {_ids(event.block_hashes)} "
                                                   f"under block {_hex(parent)}, which the view holds on no medium"))
        size = max(1, event.block_size)
        tokens = event.token_ids
        for i, block in enumerate(event.block_hashes):
            held[block] = Block(parent, tuple(tokens[i * size:(i + 1) * size]))
            parent = block
        added[medium] = added.get(medium, 0) + len(event.block_hashes)

    def _anywhere(self, block: int) -> bool:
        for blocks in self.blocks.values():
            if block in blocks:
                return True
        return False

    def _remove(self, event, removed: dict, found: list) -> None:
        medium = event.medium or GPU
        held = self.blocks.setdefault(medium, {})
        pop = held.pop
        unknown = [b for b in event.block_hashes if pop(b, None) is None]
        if unknown:
            found.append(Violation(UNKNOWN_BLOCK, f"BlockRemoved({medium}) of block(s) the view never saw "
                                                  f"stored: {_ids(unknown)} (a router's 'Failed to find block')"))
        removed[medium] = removed.get(medium, 0) + len(event.block_hashes)

    def tree_lines(self, medium: str, limit: int = 200) -> list[str]:
        """The medium's blocks as an indented tree (depth first, at most ``limit`` lines):
        a block whose parent is not held on this medium starts a tree of its own."""
        held = self.blocks.get(medium, {})
        children: dict[Optional[int], list[int]] = {}
        for block, info in held.items():
            children.setdefault(info.parent if info.parent in held else None, []).append(block)
        lines: list[str] = []
        stack = [(b, 0) for b in reversed(children.get(None, []))]
        while stack and len(lines) < limit:
            block, depth = stack.pop()
            tokens = held[block].tokens
            shown = " ".join(map(str, tokens[:8])) + (" …" if len(tokens) > 8 else "")
            lines.append(f"{'  ' * depth}{_hex(block)} [{shown}]")
            stack.extend((b, depth + 1) for b in reversed(children.get(block, [])))
        if len(lines) >= limit and len(held) > limit:
            lines.append(f"… {len(held) - limit:,} more block(s)")
        return lines


def _ours(event):
    """An event as our cache's dataclass, for ``kv_event_text``."""
    if dataclasses.is_dataclass(event):
        return event
    from .wire import from_wire

    return from_wire(event)


def _ordered(media) -> list[str]:
    return sorted(media, key=lambda m: (MEDIA.index(m) if m in MEDIA else len(MEDIA), m))


def _hex(block: int) -> str:
    return f"{block & (2**64 - 1):016x}"[:8]


def _ids(blocks) -> str:
    shown = ", ".join(_hex(b) for b in blocks[:_SHOWN])
    return f"[{shown}{', …' if len(blocks) > _SHOWN else ''}] ({len(blocks)})"
