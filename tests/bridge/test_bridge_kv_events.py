"""SGLang 0.5.23's own ZmqEventPublisher (CPU) against ours: a scenario runs through the
bridge on SGLang's cache, its KV events are published by SGLang's publisher, and
``urc listen``'s listener and view receive them: the view equals the cache's blocks after
every batch, and our publisher's batches of the same run decode to the same events.
Skipped without SGLang, as test_bridge_sglang.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglang_util import requires_sglang

pytestmark = requires_sglang()
zmq = pytest.importorskip("zmq")

from workbench.bridge.sglang_side import SGLangSide  # noqa: E402
from workbench.model.kv_wire import wire  # noqa: E402
from workbench.model.kv_wire.listener import Listener, Received  # noqa: E402
from workbench.model.kv_wire.view import ConsumerView  # noqa: E402
from workbench.model.scenarios.scenario import load_scenario  # noqa: E402
from workbench.model.timeline.driver import CacheDriver  # noqa: E402
from workbench.model.timeline.kv_router import cache_blocks  # noqa: E402
from workbench.model.timeline.runner import build_cache  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
WAIT_MS = 5000


def received(sub: Listener, count: int) -> list[Received]:
    out: list[Received] = []
    while len(out) < count:
        # a batch published while our SUB socket was still joining is never sent to it: the
        # replay socket has it (as a router fetches it)
        got = sub.poll(500) or sub.catch_up()
        assert got, "no batch, live or replayed"
        out.extend(i for i in got if isinstance(i, Received))
    return out


@pytest.mark.parametrize("name", ["tour.toml", "tour_hicache.toml", "tour_swa.toml"])
def test_sglangs_publisher_seen_by_our_listener_equals_the_cache_after_every_batch(tmp_path, name):
    from sglang.srt.disaggregation.kv_events import KVEventBatch, ZmqEventPublisher

    scenario = load_scenario(ROOT / "scenarios" / name)
    ours = CacheDriver(build_cache(scenario, "cpu"))
    theirs = SGLangSide.for_scenario(scenario)
    ours.cache.tree.kv_events.enable()
    theirs.core.kv_events.enabled = True
    replay = f"ipc://{tmp_path}/replay.ipc"
    publisher = ZmqEventPublisher(0, f"ipc://{tmp_path}/kv.ipc", replay_endpoint=replay)
    # SGLang's PUB cannot tell when we subscribed: the replay endpoint brings what we missed
    sub = Listener(f"ipc://{tmp_path}/kv.ipc", replay_endpoint=replay)
    view, batches = ConsumerView(), 0
    try:
        for step in scenario.steps:
            for side in (ours, theirs):
                try:
                    side.run(step.op, step.fields)
                except Exception:  # a step the scenario expects to be refused, on both sides
                    assert step.expect_error is not None
            mine, events = ours.cache.tree.kv_events.take(), theirs.core.kv_events.take()
            if not events:
                assert not mine
                continue
            publisher.publish(KVEventBatch(ts=1.0 + batches, events=events))
            batches += 1
            for item in received(sub, 1):
                # the same batch from our publisher's encoder decodes to the same events
                assert item.events == wire.decode_batch(wire.encode_batch(mine, 0)).events
                assert view.apply(item.seq, item.ts, item.events).passed
            assert {m: set(b) for m, b in view.blocks.items() if b} == {
                m: s for m, s in cache_blocks(ours.cache)[0].items() if s}
        assert batches >= 3 and view.batches == batches
    finally:
        sub.close()
        publisher.shutdown()
        theirs.close()
        ours.cache.close()


def test_sglangs_bytes_and_ours_are_the_same():
    import msgspec
    from sglang.srt.disaggregation import kv_events as theirs

    from cache.observe import kv_events as ours

    events = [ours.BlockStored([1, -2], None, [1, 2, 3, 4], 2, medium=ours.CPU, session_id="s"),
              ours.BlockRemoved([5], ours.GPU), ours.AllBlocksCleared()]
    their_batch = theirs.KVEventBatch(ts=2.5, events=[
        theirs.BlockStored(block_hashes=[1, -2], parent_block_hash=None, token_ids=[1, 2, 3, 4], block_size=2,
                           lora_id=None, medium="CPU_PINNED", session_id="s"),
        theirs.BlockRemoved(block_hashes=[5], medium=theirs.StorageMedium.GPU), theirs.AllBlocksCleared()],
        attn_dp_rank=0)
    assert msgspec.msgpack.Encoder().encode(their_batch) == wire.encode_batch(events, 2.5)
