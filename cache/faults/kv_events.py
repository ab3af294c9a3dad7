"""Faults in the KV event stream (cache/observe/kv_events.py): the cache itself stays right, a
router replaying its events drifts. Each lives under ``enable_kv_cache_events``
(``Fault.options``), so the fuzzer searches it with the events and the router's check on."""

from __future__ import annotations

from . import Fault, fired

CPU = "CPU_PINNED"  # cache/observe/kv_events.py's medium (not imported: this module stays torch-free)

# ---- 1. sglang#32537: a host-only node brought back by an insert publishes no GPU store -------

UNEVICT_NO_GPU_STORE = "unevict-publishes-no-gpu-store"


def _install_unevict_no_gpu_store(cache) -> None:
    """HiRadixCache before PR #32537: when an insert walked over a node whose device KV
    had been evicted but whose host copy remained, the fresh KV put the node back on the
    GPU without a ``BlockStored(GPU)``. The router's last word on those blocks was the
    GPU removal at the demotion, so it saw them host-only while the device held them.
    (0.5.23's unified tree core publishes it: ``_unevict_node_on_insert``.) The faulty
    copy runs the correct insert-over-host-only step and drops the GPU store it makes."""
    tree = cache.tree
    correct = tree.unevict
    recorder = tree.kv_events

    def unevict(node, value, session_id=None):
        store = recorder.store

        def store_but_not_this_gpu(stored, medium="GPU", session_id=None):
            if stored is node and medium == "GPU":
                fired(cache, UNEVICT_NO_GPU_STORE)
                return
            store(stored, medium, session_id)

        recorder.store = store_but_not_this_gpu
        try:
            correct(node, value, session_id)
        finally:
            del recorder.store  # the class's method again

    tree.unevict = unevict


# ---- 2. sglang#38486 (#38429): a storage prefetch's refill publishes no BlockStored(CPU) ---------------

REFILL_NO_CPU_STORE = "prefetch-refill-publishes-no-cpu-store"


def _install_refill_no_cpu_store(cache) -> None:
    """The unified tree core before PR #38486 (also proposed as #38429): ``insert_host``,
    which places the pages a storage prefetch read as host copies (a new host-only node,
    or a device node refilled), published no ``BlockStored(CPU_PINNED)``, though every
    other path that gives a node a host copy does. A router never learned of those host
    blocks; when host eviction later removed them, their ``BlockRemoved(CPU_PINNED)``
    named blocks it had never seen ("Failed to find block" in Dynamo's indexer). 0.5.23
    publishes the store in ``insert_host``. The faulty copy runs the correct placement
    and drops the CPU stores it makes."""
    tree = cache.tree
    correct = tree.insert_host
    recorder = tree.kv_events

    def insert_host(anchor, key, host_rows):
        store = recorder.store

        def store_but_not_on_the_host(node, medium="GPU", session_id=None):
            if medium == CPU:
                fired(cache, REFILL_NO_CPU_STORE)
                return
            store(node, medium, session_id)

        recorder.store = store_but_not_on_the_host
        try:
            return correct(anchor, key, host_rows)
        finally:
            del recorder.store

    tree.insert_host = insert_host


FAULTS = (
    Fault(UNEVICT_NO_GPU_STORE, "sgl-project/sglang#32537", ("full",),
          "an insert over a host-only node puts its KV back on the device without a BlockStored(GPU): a router "
          "replaying the events sees those blocks host-only", _install_unevict_no_gpu_store,
          options=(("enable_kv_cache_events", True),), host_tier=True),
    Fault(REFILL_NO_CPU_STORE, "sgl-project/sglang#38486", ("full",),
          "pages a storage prefetch places on the host publish no BlockStored(CPU_PINNED): a router never sees "
          "them, and their later removal names blocks it does not know", _install_refill_no_cpu_store,
          options=(("enable_kv_cache_events", True),), storage="best_effort"),
)
