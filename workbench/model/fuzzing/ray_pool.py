"""A campaign's episodes as Ray tasks (``urc fuzz --ray [ADDRESS]``).

``RayPool`` offers what the campaign asks of its process pool — ``submit``, ``map``,
``shutdown`` and a ``progress`` queue — so planning, merging by signature, ``--first``
and shrinking are the same code on a laptop's cores and on a cluster. Episodes,
their results and the shrunk reproductions travel as Ray objects and are collected on
the driver, which writes every file. A worker reports its steps only when its episode
ends (the process pool's per-256-step reports need a queue a cluster does not share).

Ray is an optional extra (``pip install 'unified-cache-workbench[ray]'``): nothing here
imports it until a campaign asks for it. No address: a local Ray instance on this
machine's cores, started and stopped with the campaign. An address: that cluster,
with this checkout's ``cache`` and ``workbench`` packages shipped along with the job
(its nodes need the dependencies: torch, numpy).
"""

from __future__ import annotations

import concurrent.futures
import queue
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Optional

from ..scenarios.errors import ScenarioError

LOCAL = "local"  # --ray with no address


class RayUnavailable(ScenarioError):
    """Ray is not installed, or the cluster cannot be reached (one line, exit 2)."""


class RayPool:
    """Tasks on a Ray cluster behind the process pool's interface."""

    def __init__(self, address: str = LOCAL, cpus: Optional[int] = None) -> None:
        try:
            import ray
        except ImportError:
            raise RayUnavailable("--ray needs Ray: pip install 'unified-cache-workbench[ray]'") from None
        self.ray = ray
        self.progress: queue.Queue = queue.Queue()  # nothing arrives: results carry the steps
        self._refs: list = []
        self._started = not ray.is_initialized()
        if self._started:
            try:
                if address == LOCAL:
                    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False,
                             object_store_memory=256 * 2**20, configure_logging=False)
                else:
                    ray.init(address=address, log_to_driver=False, configure_logging=False,
                             runtime_env={"py_modules": _own_packages()})
            except Exception as exc:  # ConnectionError, ValueError, RuntimeError from Ray's start-up
                raise RayUnavailable(f"--ray {address}: cannot start or reach Ray: {exc}".splitlines()[0]) from None
        self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._apply: Any = None

    def submit(self, fn: Callable, *args) -> concurrent.futures.Future:
        if self._apply is None:  # one remote function for any callable (a partial, a builtin)
            self._apply = self.ray.remote(num_cpus=1, max_retries=0)(_apply)
        ref = self._apply.remote(fn, *args)
        self._refs.append(ref)
        future = ref.future()
        future.cancel = lambda ref=ref, future=future: _cancel(self.ray, ref, future)  # type: ignore[method-assign]
        return future

    def map(self, fn: Callable, *iterables: Iterable) -> list:
        futures = [self.submit(fn, *args) for args in zip(*iterables)]
        return [f.result() for f in futures]

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        if cancel_futures:
            for ref in self._refs:
                try:
                    self.ray.cancel(ref, force=True)
                except Exception:  # finished already, or its worker is gone
                    pass
        if self._started:
            self.ray.shutdown()


def _apply(fn: Callable, *args):
    return fn(*args)


def _cancel(ray, ref, future: concurrent.futures.Future) -> bool:
    """Cancel a task not yet finished (Ray stops it if it has not started, or kills
    its worker if it has); True when the future will carry no result."""
    if future.done():
        return False
    try:
        ray.cancel(ref, force=True)
    except Exception:
        return False
    return True


def _own_packages() -> list[str]:
    root = Path(__file__).resolve().parents[3]
    return [str(root / "cache"), str(root / "workbench")]
