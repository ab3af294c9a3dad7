"""A run's publisher as a context: bound before the first step, waited on for its
subscribers, kept answering replays a while after the last, closed however the run ends."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Optional

from ..scenarios.scenario import ScenarioError

WAIT_MOST = 60.0  # seconds --kv-events-wait waits for its subscribers


@contextlib.contextmanager
def open_publisher(endpoint: str, replay: Optional[str] = None, subscribers: int = 0,
                   linger: float = 0.0) -> Iterator:
    import zmq

    from .publisher import Publisher

    try:
        publisher = Publisher(endpoint, replay)
    except zmq.ZMQError as exc:
        raise ScenarioError(f"--kv-events: cannot bind {endpoint}: {exc}") from None
    try:
        if subscribers:
            print(f"waiting for {subscribers} subscriber(s) on {publisher.endpoint}", file=sys.stderr, flush=True)
            if not publisher.wait_for_subscribers(subscribers, WAIT_MOST):
                raise ScenarioError(f"--kv-events-wait: {publisher.subscribers} of {subscribers} subscriber(s) "
                                    f"came within {WAIT_MOST:g} s")
        yield publisher
        if linger:
            publisher.linger(linger)
    finally:
        publisher.close()
