"""The commands' doors to the sockets: a run's publisher as a context (bound before the
first step, waited on for its subscribers, kept answering replays a while after the last,
closed however the run ends) and a listener, each refused in one line when it cannot be."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Optional

from ..scenarios.scenario import ScenarioError
from . import check_endpoint, require

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


def open_listener(endpoint: str, replay=None, topic: str = "", what: str = "urc listen"):
    """A listener on ``endpoint`` (and the server's ``replay`` endpoint), refused in one
    line when the extra is missing or an endpoint is not one."""
    require(what)
    check_endpoint(endpoint, "ENDPOINT")
    if replay:
        check_endpoint(replay, "--replay")
    import zmq

    from .listener import Listener

    try:
        return Listener(endpoint, replay, topic)
    except zmq.ZMQError as exc:
        raise ScenarioError(f"cannot subscribe to {endpoint}: {exc}") from None
