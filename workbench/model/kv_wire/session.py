"""One listening session: what the listener receives, applied to the consumer's view
and, where asked, written to a JSONL record and a store, as ``urc listen``, the TUI's
live view and ``urc bench --listen`` all drive it."""

from __future__ import annotations

import dataclasses
import json
from typing import Optional, TextIO, Union

import msgspec

from .listener import Listener, Problem, Received
from .store import ListenStore
from .view import BatchRecord, ConsumerView

Outcome = Union[BatchRecord, Problem]


@dataclasses.dataclass
class ListenSession:
    listener: Listener
    view: ConsumerView = dataclasses.field(default_factory=ConsumerView)
    record: Optional[TextIO] = None  # JSONL: one line per event, with its batch's seq and ts; one per problem
    store: Optional[ListenStore] = None
    caught_up: bool = False

    def pump(self, timeout_ms: int) -> list[Outcome]:
        """Take what arrived (waiting up to ``timeout_ms``; first, what the server's
        replay socket still buffers), apply it, write it; the applied batches' records
        and the problems, in order."""
        out: list[Outcome] = []
        items = [] if self.caught_up else self.listener.catch_up()
        self.caught_up = True
        for item in items + self.listener.poll(0 if items else timeout_ms):
            if isinstance(item, Problem):
                if not item.notice:
                    self.view.problem(item.text)
                if self.store is not None and not item.notice:
                    self.store.problem(item.text)
                if self.record is not None:
                    self.record.write(json.dumps({"note" if item.notice else "problem": item.text}) + "\n")
                out.append(item)
                continue
            record = self.view.apply(item.seq, item.ts, item.events)
            if record is None:  # already applied (a replay overlapping the live stream)
                continue
            if self.store is not None:
                self.store.add(item)
            if self.record is not None:
                self._write(item)
            out.append(record)
        if out and self.record is not None:
            self.record.flush()
        return out

    def _write(self, item: Received) -> None:
        head = {"seq": item.seq, "ts": item.ts}
        self.record.write("".join(json.dumps({**head, **msgspec.to_builtins(e)}, separators=(",", ":")) + "\n"
                                  for e in item.events))

    def close(self) -> None:
        self.listener.close()
        if self.store is not None:
            self.store.close()
