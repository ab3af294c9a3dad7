"""``urc bench --listen``: how fast ``urc listen`` takes a server's KV event stream, and
its memory over a long one, while it writes a store.

Two interpreters, as a server and a listener would be: the publisher (our ``Publisher``,
the bytes SGLang sends) streams a synthetic workload as fast as the listener takes it (its sends wait when the
queue between them is full, where a server's would drop), batches of
``BATCH`` events in which chains of blocks are stored on the GPU and the CPU and the
oldest removed, so the cache it describes stays the same size while the stream goes on;
the listener decodes, applies and stores every batch and reports its rate (per second,
and per second of its own CPU time: the machine may be busy), the gaps it saw and its
resident memory (``VmRSS`` at each tenth of the stream, the peak ``VmHWM``). The
publisher is faster than the listener, so the listener's ZMQ receive queue stays full
(``RCVHWM``, 100,000 messages, as SGLang's send side): that queue is most of the memory,
bounded whatever the stream's length."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

BATCH = 16  # events per batch: a busy scheduler step's
CHAIN = 4  # blocks per stored chain
LIVE = 4096  # chains the described cache holds


def listen_report(events: int, emit: Callable[[str], None] = lambda line: None) -> dict:
    with tempfile.TemporaryDirectory(prefix="urc-bench-listen-") as folder:
        endpoint, store = f"ipc://{folder}/kv.ipc", os.path.join(folder, "run.urcdb")
        listener = subprocess.Popen([sys.executable, "-m", "workbench.bench.listen", "--listen", endpoint,
                                     str(events), store], stdout=subprocess.PIPE, text=True)
        emit(f"publishing {events:,} events to a listener writing a store")
        publisher = subprocess.run([sys.executable, "-m", "workbench.bench.listen", "--publish", endpoint,
                                    str(events)], capture_output=True, text=True)
        out, _ = listener.communicate(timeout=3600)
        if publisher.returncode or listener.returncode:
            raise RuntimeError(f"the bench's publisher or listener failed: {publisher.stderr.strip()[-300:]}")
        report = json.loads(out.strip().splitlines()[-1])
        report["store_mb"] = round(os.path.getsize(store) / 1e6, 1)
        return report


def _batches(events: int):
    """The synthetic stream's batches as wire structs, made as they are sent."""
    from ..model.kv_wire.wire import BlockRemoved, BlockStored

    made, chain = 0, 0
    while made < events:
        batch = []
        while len(batch) < min(BATCH, events - made):
            medium = "GPU" if chain % 2 == 0 else "CPU_PINNED"
            if chain >= LIVE and len(batch) % 2:
                old = chain - LIVE
                batch.append(BlockRemoved([old * CHAIN + i for i in range(CHAIN)], "GPU" if old % 2 == 0
                                          else "CPU_PINNED"))
                continue
            first = chain * CHAIN
            batch.append(BlockStored(list(range(first, first + CHAIN)), None, list(range(first * 16, (first + CHAIN) * 16)),
                                     16, None, medium))
            chain += 1
        made += len(batch)
        yield batch


def _publish(endpoint: str, events: int) -> None:
    import msgspec

    from ..model.kv_wire.publisher import Publisher
    from ..model.kv_wire.wire import KVEventBatch

    publisher = Publisher(endpoint, hwm=1000, wait_when_full=True)  # every batch reaches the listener, at its pace
    encode = msgspec.msgpack.Encoder().encode
    try:
        if not publisher.wait_for_subscribers(1, 60):
            raise SystemExit("no listener subscribed within 60 s")
        for batch in _batches(events):
            publisher.publish_payload(encode(KVEventBatch(time.time(), batch, 0)))
    finally:
        publisher.close(linger_ms=-1)  # every batch delivered


def _listen(endpoint: str, events: int, store_path: str) -> None:
    from ..model.kv_wire.listener import Listener
    from ..model.kv_wire.session import ListenSession
    from ..model.kv_wire.store import ListenStore

    session = ListenSession(Listener(endpoint), store=ListenStore(store_path, endpoint))
    view, samples, started, cpu = session.view, [], None, time.process_time()
    mark = max(1, events // 10)
    try:
        while view.events < events:
            if not session.pump(10_000) and started is not None:
                break  # the publisher stopped short
            if started is None and view.batches:
                started = time.perf_counter()
            while view.events >= mark * (len(samples) + 1) and len(samples) < 10:
                samples.append(_memory("VmRSS"))
        seconds = time.perf_counter() - (started or time.perf_counter())
        cpu = time.process_time() - cpu
    finally:
        session.close()
    gaps = sum(1 for r in view.recent for v in r.violations if v.name.endswith("gap"))
    print(json.dumps({
        "events": view.events, "batches": view.batches, "seconds": round(seconds, 2),
        "events_per_second": round(view.events / seconds) if seconds else None,
        "events_per_cpu_second": round(view.events / cpu) if cpu else None,
        "violations": view.violations, "gaps_in_last_batches": gaps, "blocks_held": sum(view.held().values()),
        "rss_mb_each_tenth": samples, "peak_rss_mb": _memory("VmHWM")}))


def _memory(field: str) -> float:
    """This process's resident memory in MB, from /proc (0 where there is none)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return 0.0


if __name__ == "__main__":
    if sys.argv[1] == "--publish":
        _publish(sys.argv[2], int(sys.argv[3]))
    else:
        _listen(sys.argv[2], int(sys.argv[3]), sys.argv[4])
