"""Subscribe to a server's KV event stream, as a router does: a SUB socket on its PUB
endpoint and, given one, its replay endpoint to fetch batches the SUB socket missed.

Everything received is untrusted: a message is at most ``max_bytes`` (ZMQ disconnects
a peer that sends more), must be exactly [topic, 8-byte seq, payload], and its payload
is decoded strictly into the wire structs; anything else is a ``Problem`` (one line)
and the stream goes on. A dropped or restored connection is a ``Problem`` too."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import time
from typing import Optional, Union

import msgspec
import zmq
from zmq.utils.monitor import recv_monitor_message

from . import wire

MAX_BYTES = 16 << 20  # one message: far above any batch a scheduler step publishes
RCVHWM = 100_000  # messages queued before ZMQ drops (SGLang's publisher HWM)
DRAIN = 4096  # messages taken per poll, so a caller's loop keeps its pace
REPLAY_WAIT = 2.0  # seconds a replay request waits for its answer
_MONITORS = itertools.count()
_WATCHED = {zmq.EVENT_CONNECTED: ("connected to", True), zmq.EVENT_DISCONNECTED: ("lost the connection to", False)}


@dataclasses.dataclass(frozen=True)
class Received:
    seq: int
    ts: float
    events: list  # wire structs (wire.from_wire makes our cache's dataclasses of them)
    attn_dp_rank: Optional[int]
    payload: bytes = dataclasses.field(default=b"", repr=False)  # as it arrived (a store keeps it)


@dataclasses.dataclass(frozen=True)
class Problem:
    text: str
    notice: bool = False  # news, not trouble (a connection made)


Item = Union[Received, Problem]


class Listener:
    def __init__(self, endpoint: str, replay_endpoint: Optional[str] = None, topic: str = "",
                 max_bytes: int = MAX_BYTES, context: Optional[zmq.Context] = None, rcvhwm: int = RCVHWM) -> None:
        self._ctx = context or zmq.Context.instance()
        self.endpoint = endpoint
        self.replay_endpoint = replay_endpoint
        self._topic = topic.encode("utf-8")
        self._max_bytes = max_bytes
        self._sub = self._ctx.socket(zmq.SUB)
        self._sub.setsockopt(zmq.MAXMSGSIZE, max_bytes)
        self._sub.setsockopt(zmq.RCVHWM, rcvhwm)
        self._sub.setsockopt(zmq.LINGER, 0)
        # a monitor address of our own: pyzmq's default names it by file descriptor, which a
        # socket closed a moment ago may still hold
        watch = f"inproc://urc-listen-monitor-{next(_MONITORS)}-{id(self):x}"
        self._sub.monitor(watch, zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
        self._monitor = self._ctx.socket(zmq.PAIR)
        self._monitor.connect(watch)
        self._replay = None
        self.expected: Optional[int] = 0 if replay_endpoint else None  # with replay: fetch from the first batch
        try:
            self._sub.connect(endpoint)
            self._sub.setsockopt(zmq.SUBSCRIBE, self._topic)
            if replay_endpoint:
                self._replay = self._ctx.socket(zmq.DEALER)
                self._replay.setsockopt(zmq.MAXMSGSIZE, max_bytes)
                self._replay.setsockopt(zmq.LINGER, 0)
                self._replay.connect(replay_endpoint)
        except zmq.ZMQError:
            self.close()
            raise
        self._poller = zmq.Poller()
        self._poller.register(self._sub, zmq.POLLIN)
        self._poller.register(self._monitor, zmq.POLLIN)

    def poll(self, timeout_ms: int) -> list[Item]:
        """What arrived, waiting up to ``timeout_ms`` for the first of it (0: none)."""
        out: list[Item] = []
        ready = dict(self._poller.poll(timeout_ms))
        if self._monitor in ready:
            out.extend(self._connection_news())
        if self._sub in ready:
            for _ in range(DRAIN):
                frames, count = _recv_frames(self._sub, 3)
                if not count:
                    break
                out.extend(self._received(frames, count))
        return out

    def catch_up(self) -> list[Item]:
        """With a replay endpoint: fetch now what the server buffers from the next batch
        on (at the start, the history; after a quiet spell, a batch the SUB socket missed
        while connecting). Without one: nothing."""
        if self._replay is None:
            return []
        start = self.expected or 0
        out = self._fetch(start, 2**63 - 1)
        for item in out:
            if isinstance(item, Received) and item.seq >= (self.expected or 0):
                self.expected = item.seq + 1
        return out

    def _received(self, frames: list[bytes], count: int) -> list[Item]:
        item = decode(frames, self._topic, count)
        if not isinstance(item, Received):
            return [item]
        out: list[Item] = []
        if self._replay is not None and self.expected is not None and item.seq > self.expected:
            out.extend(self._fetch(self.expected, item.seq))
        if self.expected is None or item.seq >= self.expected:
            self.expected = item.seq + 1
        out.append(item)
        return out

    def _fetch(self, start: int, stop: int) -> list[Item]:
        """Batches ``start`` .. ``stop``-1 from the replay socket (what it still buffers)."""
        self._replay.send_multipart((b"", wire.seq_bytes(start)))
        out: list[Item] = []
        deadline = time.monotonic() + REPLAY_WAIT
        while (left := deadline - time.monotonic()) > 0:
            if not self._replay.poll(int(left * 1000) + 1):
                break
            frames, count = _recv_frames(self._replay, 4)
            if not count:
                continue
            if count != 4 or frames[0] != b"":
                out.append(Problem(f"replay from {self.replay_endpoint}: a malformed answer ({count} frames)"))
                continue
            item = decode(frames[1:], self._topic, count - 1)
            if isinstance(item, Received) and item.seq == -1:  # the end marker
                return out
            if isinstance(item, Problem) or start <= item.seq < stop:
                out.append(item)
        out.append(Problem(f"replay from {self.replay_endpoint}: no end marker within {REPLAY_WAIT:g} s"))
        return out

    def _connection_news(self) -> list[Problem]:
        out = []
        while self._monitor.poll(0):
            try:
                event = recv_monitor_message(self._monitor, zmq.NOBLOCK)
            except (zmq.Again, ValueError):
                break
            said = _WATCHED.get(event.get("event"))
            if said:
                out.append(Problem(f"{said[0]} {self.endpoint}", said[1]))
        return out

    def close(self) -> None:
        with contextlib.suppress(zmq.ZMQError):
            self._sub.disable_monitor()
        for socket in (self._sub, self._monitor, self._replay):
            if socket is not None:
                socket.close(linger=0)


def decode(frames: list[bytes], topic: bytes = b"", count: Optional[int] = None) -> Item:
    """One message's frames (``count`` of them, if more were dropped) as a batch, or the
    one line saying why they are not one. A replay's end marker is a batch numbered -1."""
    count = len(frames) if count is None else count
    if count != 3:
        return Problem(f"malformed message: {count} frame(s), a KV event batch has 3 (topic, seq, payload)")
    name, seq, payload = frames
    if seq == wire.END_SEQ and not payload:
        return Received(-1, 0.0, [], None)
    if not name.startswith(topic):
        return Problem(f"malformed message: topic {name[:40]!r} is not {topic!r}")
    try:
        number = wire.seq_of(seq)
    except ValueError as exc:
        return Problem(f"malformed message: {exc}")
    try:
        batch = wire.decode_batch(payload)
    except msgspec.DecodeError as exc:
        return Problem(f"malformed batch {number}: {str(exc)[:200]} (skipped; the view keeps what it had)")
    return Received(number, batch.ts, batch.events, batch.attn_dp_rank, payload)


def _recv_frames(socket, most: int) -> tuple[list[bytes], int]:
    """The next message's first ``most`` frames and how many it had, without blocking
    (0: none waiting); the frames past ``most`` are read and dropped, so a message of
    many frames costs no memory."""
    try:
        frames = [socket.recv(zmq.NOBLOCK)]
    except zmq.Again:
        return [], 0
    count = 1
    while socket.getsockopt(zmq.RCVMORE):
        frame = socket.recv()
        count += 1
        if len(frames) < most:
            frames.append(frame)
    return frames, count
