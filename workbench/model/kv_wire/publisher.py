"""Publish KV event batches as SGLang's ``ZmqEventPublisher`` does: a PUB socket
(``[topic, seq, payload]``, seq from 0), and optionally a ROUTER replay socket that
answers ``[empty, start seq]`` with the buffered batches from there and an end marker.

No thread: a run publishes from its own loop, and the replay socket is served on each
publish and while ``linger`` waits. The PUB socket is an XPUB, which a subscriber cannot
tell apart and which lets ``wait_for_subscribers`` see a subscription arrive, so a run
need not lose its first batches to a router still connecting."""

from __future__ import annotations

import time
from collections import deque
from typing import Optional

import zmq

from . import wire

BUFFER_STEPS = 10_000  # SGLang's default replay buffer
HWM = 100_000  # SGLang's default high-water mark


class Publisher:
    def __init__(self, endpoint: str, replay_endpoint: Optional[str] = None, topic: str = "",
                 buffer_steps: int = BUFFER_STEPS, hwm: int = HWM, context: Optional[zmq.Context] = None,
                 wait_when_full: bool = False) -> None:
        self._ctx = context or zmq.Context.instance()
        self._topic = topic.encode("utf-8")
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=buffer_steps)
        self._seq = 0
        self.subscribers = 0
        self._pub = self._ctx.socket(zmq.XPUB)
        self._pub.set_hwm(hwm)
        self._pub.setsockopt(zmq.XPUB_VERBOSE, 1)  # every subscriber's subscription, not only the first
        if wait_when_full:  # a send waits for a slow subscriber instead of dropping (a benchmark's pacing)
            self._pub.setsockopt(zmq.XPUB_NODROP, 1)
        self._replay = None
        try:
            self._pub.bind(endpoint)
            self.endpoint = self._pub.getsockopt_string(zmq.LAST_ENDPOINT)
            if replay_endpoint is not None:
                self._replay = self._ctx.socket(zmq.ROUTER)
                self._replay.bind(replay_endpoint)
            self.replay_endpoint = (self._replay.getsockopt_string(zmq.LAST_ENDPOINT)
                                    if self._replay is not None else None)
        except zmq.ZMQError:
            self.close()
            raise

    @property
    def seq(self) -> int:
        """The sequence number the next batch gets (= batches published)."""
        return self._seq

    def publish(self, events, ts: Optional[float] = None) -> int:
        """Send one batch of our cache's events; returns its sequence number."""
        payload = wire.encode_batch(events, time.time() if ts is None else ts)
        return self.publish_payload(payload)

    def publish_payload(self, payload: bytes) -> int:
        seq = self._seq
        self._seq += 1
        while True:
            try:
                self._pub.send_multipart((self._topic, wire.seq_bytes(seq), payload), copy=False)
                break
            except zmq.Again:  # full, with wait_when_full: wait for room
                self._pub.poll(100, zmq.POLLOUT)
        self._buffer.append((seq, payload))
        self.serve(0)
        return seq

    def serve(self, timeout_ms: int = 0) -> None:
        """Answer waiting replay requests and count subscriptions, waiting up to ``timeout_ms``."""
        poller = zmq.Poller()
        poller.register(self._pub, zmq.POLLIN)
        if self._replay is not None:
            poller.register(self._replay, zmq.POLLIN)
        for socket, _ in poller.poll(timeout_ms):
            if socket is self._pub:
                self._subscriptions()
            else:
                self._serve_replay()

    def wait_for_subscribers(self, count: int, timeout: float) -> bool:
        """Block until ``count`` subscriptions arrived or ``timeout`` seconds passed."""
        deadline = time.monotonic() + timeout
        while self.subscribers < count:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.serve(int(left * 1000) + 1)
        return True

    def linger(self, seconds: float) -> None:
        """Keep answering replay requests for ``seconds`` (a router that connects late)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.serve(int(left * 1000) + 1)

    def _subscriptions(self) -> None:
        while True:
            try:
                message = self._pub.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            if message[:1] == b"\x01":
                self.subscribers += 1
            elif message[:1] == b"\x00":
                self.subscribers = max(0, self.subscribers - 1)

    def _serve_replay(self) -> None:
        while True:
            try:
                frames = self._replay.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(frames) != 3 or len(frames[2]) != 8:
                continue  # not a replay request: SGLang ignores it too
            client, _, start = frames
            first = int.from_bytes(start, "big")
            for seq, payload in self._buffer:
                if seq >= first:
                    self._replay.send_multipart((client, b"", self._topic, wire.seq_bytes(seq), payload))
            self._replay.send_multipart((client, b"", b"", wire.END_SEQ, b""))

    def close(self, linger_ms: int = 200) -> None:
        """Close the sockets, giving queued batches ``linger_ms`` to leave (-1: until they have)."""
        for socket in (self._pub, self._replay):
            if socket is not None:
                socket.close(linger=linger_ms)
