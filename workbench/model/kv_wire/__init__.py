"""SGLang's KV events on the wire: the msgpack batches ``ZmqEventPublisher`` sends
over ZMQ, published from a run (``urc run --kv-events tcp://…``) and received from a
live server (``urc listen``) into a consumer's view of its cache.

pyzmq is an optional extra (msgspec, which reads the batches, is always installed):
``require()`` turns its absence into one line naming it, before anything opens a socket."""

from __future__ import annotations

from ..scenarios.scenario import ScenarioError

EXTRA = "pip install 'unified-cache-workbench[kv-events]'"
SCHEMES = ("tcp://", "ipc://", "inproc://")


def require(what: str = "KV events over ZMQ") -> None:
    """Refuse, in one line, when pyzmq cannot be imported."""
    try:
        import zmq  # noqa: F401
    except ImportError:
        raise ScenarioError(f"{what} needs zmq (not installed): {EXTRA}") from None


def is_endpoint(text: str) -> bool:
    """A ZMQ endpoint rather than a file name."""
    return text.startswith(SCHEMES)


def check_endpoint(text: str, option: str) -> str:
    """``text`` as an endpoint this workbench can use, or one line saying why not."""
    if not text.startswith(("tcp://", "ipc://")):
        raise ScenarioError(f"{option} needs a tcp://HOST:PORT or ipc://PATH endpoint (got {text[:80]!r})")
    rest = text.split("://", 1)[1]
    if not rest or any(ord(c) < 32 for c in text):
        raise ScenarioError(f"{option}: {text[:80]!r} names no address")
    if text.startswith("tcp://"):
        host, _, port = rest.rpartition(":")
        if not host or not (port.isdigit() and 0 < int(port) <= 65535):
            raise ScenarioError(f"{option}: {text[:80]!r} needs HOST:PORT with a port from 1 to 65535")
    return text

