"""SGLang's KV event wire format, ours end to end: a run published over ZMQ (urc run
--kv-events ENDPOINT), received by the listener (urc listen) into the consumer's view,
which equals the cache's blocks after every batch; the view's named violations; what a
malformed message, an oversized one and a missing extra do."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

zmq = pytest.importorskip("zmq")

from cache.observe.kv_events import CPU, GPU, AllBlocksCleared, BlockRemoved, BlockStored  # noqa: E402
from urc_util import urc  # noqa: E402
from workbench.model.kv_wire import wire  # noqa: E402
from workbench.model.kv_wire.listener import Listener, Problem, Received  # noqa: E402
from workbench.model.kv_wire.publisher import Publisher  # noqa: E402
from workbench.model.kv_wire.store import replay_store  # noqa: E402
from workbench.model.kv_wire.view import SEQUENCE_GAP, UNKNOWN_BLOCK, UNKNOWN_PARENT, ConsumerView  # noqa: E402
from workbench.model.scenarios.scenario import load_scenario  # noqa: E402
from workbench.model.timeline.kv_router import cache_blocks  # noqa: E402
from workbench.model.timeline.runner import Runner  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
WAIT_MS = 5000


def endpoint(tmp_path, name="kv") -> str:
    return f"ipc://{tmp_path}/{name}.ipc"


def connected(tmp_path, **listener):
    """A publisher and a listener subscribed to it (the subscription seen by the publisher)."""
    pub = Publisher(endpoint(tmp_path))
    sub = Listener(pub.endpoint, **listener)
    assert pub.wait_for_subscribers(1, WAIT_MS / 1000)
    return pub, sub


def batches(sub: Listener, count: int) -> list:
    """The next ``count`` items, each waited for (never a sleep)."""
    out = []
    while len([i for i in out if not getattr(i, "notice", False)]) < count:
        got = sub.poll(WAIT_MS)
        assert got, f"nothing within {WAIT_MS} ms after {out}"
        out.extend(got)
    return [i for i in out if not getattr(i, "notice", False)]


def held(view: ConsumerView) -> dict:
    return {m: set(b) for m, b in view.blocks.items() if b}


@pytest.mark.parametrize("name", ["tour.toml", "tour_hicache.toml", "tour_hicache_hybrid.toml", "storage_backup.toml"])
def test_a_published_run_seen_by_the_listener_equals_the_cache_after_every_batch(tmp_path, name):
    pub, sub = connected(tmp_path)
    runner = Runner(load_scenario(ROOT / "scenarios" / name), kv_events=pub)
    view, compared = ConsumerView(), 0
    while not runner.done:
        before = pub.seq
        runner.step()
        for item in batches(sub, pub.seq - before):
            assert isinstance(item, Received)
            assert view.apply(item.seq, item.ts, item.events).passed
        cache = {m: s for m, s in cache_blocks(runner.cache)[0].items() if s}
        assert held(view) == cache
        compared += pub.seq > before
    assert compared >= 3 and view.batches == pub.seq
    pub.close(), sub.close()


def test_the_wire_bytes_decode_back_to_the_same_events():
    events = [BlockStored([1, -2], None, [1, 2, 3, 4], 2, medium=CPU, session_id="s"), BlockRemoved([5], GPU),
              AllBlocksCleared(), BlockStored([7], 3, [(1, 2), (2, 3)], 2)]
    decoded = wire.decode_batch(wire.encode_batch(events, 2.5))
    assert decoded.ts == 2.5 and decoded.attn_dp_rank == 0
    assert [wire.from_wire(e) for e in decoded.events] == events


def test_the_view_names_an_unknown_removal_an_unknown_parent_and_a_gap():
    view = ConsumerView()
    first = view.apply(0, 0.0, [BlockStored([10, 11], None, [1, 2], 1)])
    assert first.passed and first.added == {GPU: 2} and view.held() == {GPU: 2}
    [orphan] = view.apply(1, 0.0, [BlockStored([20], 99, [5], 1)]).violations
    assert orphan.name == UNKNOWN_PARENT
    [unknown] = view.apply(2, 0.0, [BlockRemoved([11, 42], GPU)]).violations
    assert unknown.name == UNKNOWN_BLOCK and view.held() == {GPU: 2}  # the known one went
    [gap] = view.apply(6, 0.0, [AllBlocksCleared()]).violations
    assert gap.name == SEQUENCE_GAP and "3..5 (3)" in gap.message and view.held() == {}
    assert view.apply(4, 0.0, [BlockRemoved([1])]) is None  # an old batch (a replay's overlap) is skipped
    assert view.violations == 3 and view.batches == 4


def test_a_child_stored_under_a_block_on_another_medium_is_no_orphan():
    view = ConsumerView()
    view.apply(0, 0.0, [BlockStored([1], None, [1], 1, medium=CPU)])
    assert view.apply(1, 0.0, [BlockStored([2], 1, [2], 1, medium=GPU)]).passed
    assert view.tree_lines(GPU) == [f"{2:016x}"[:8] + " [2]"]


def test_a_gap_on_the_wire_is_a_violation_without_replay_and_fetched_with_it(tmp_path):
    pub, sub = connected(tmp_path)
    view = ConsumerView()
    pub.publish([BlockStored([1], None, [1], 1)])
    pub._seq += 2  # two batches the subscriber never gets
    pub.publish([BlockRemoved([1])])
    for item in batches(sub, 2):
        view.apply(item.seq, item.ts, item.events)
    assert [v.name for r in view.recent for v in r.violations] == [SEQUENCE_GAP]
    sub.close(), pub.close()

    pub = Publisher(endpoint(tmp_path, "r"), f"ipc://{tmp_path}/replay.ipc")
    for block in range(5):  # published before anyone subscribed: only a replay brings them
        pub.publish([BlockStored([block], block - 1 if block else None, [block], 1)])
    sub = Listener(pub.endpoint, replay_endpoint=pub.replay_endpoint)
    assert pub.wait_for_subscribers(1, WAIT_MS / 1000)
    stop = threading.Event()
    server = threading.Thread(target=lambda: [pub.serve(20) for _ in iter(stop.is_set, True)])
    pub.publish([BlockRemoved([4])])
    server.start()
    try:
        got = batches(sub, 6)
    finally:
        stop.set()
        server.join()
    view = ConsumerView()
    assert [view.apply(i.seq, i.ts, i.events).passed for i in got] == [True] * 6
    assert view.held() == {GPU: 4}
    sub.close(), pub.close()


def test_malformed_messages_are_one_line_each_and_the_stream_goes_on(tmp_path):
    ctx = zmq.Context.instance()
    raw = ctx.socket(zmq.XPUB)
    raw.bind(endpoint(tmp_path))
    sub = Listener(endpoint(tmp_path))
    assert raw.poll(WAIT_MS) and raw.recv() == b"\x01"  # subscribed
    good = wire.encode_batch([BlockStored([1], None, [1], 1)], 1.0)
    for frames in ([b"", b"\x00" * 8], [b"", b"\x00" * 3, good], [b"", wire.seq_bytes(0), b"\xc1junk"],
                   [b"", wire.seq_bytes(0), wire._encoder.encode([1.0, [{"type": "BlockStored"}], 0])],
                   [b"", wire.seq_bytes(0), good] + [b"x"] * 50, [b"", wire.seq_bytes(0), good]):
        raw.send_multipart(frames)
    got = batches(sub, 6)
    problems = [i.text for i in got if isinstance(i, Problem)]
    assert len(problems) == 5 and "2 frame(s)" in problems[0] and "53 frame(s)" in problems[4]
    assert "8 bytes" in problems[1] and all(p.startswith("malformed") for p in problems)
    assert isinstance(got[-1], Received) and [wire.from_wire(e) for e in got[-1].events] == [BlockStored([1], None, [1], 1)]
    sub.close(), raw.close(0)


def test_an_oversized_message_drops_the_connection_and_nothing_else(tmp_path):
    pub, sub = connected(tmp_path, max_bytes=2000)
    pub.publish([BlockStored(list(range(1000)), None, list(range(1000)), 1)])
    pub.publish([BlockStored([1], None, [1], 1)])
    lost = []
    while not lost:
        got = sub.poll(WAIT_MS)
        assert got
        lost = [i for i in got if isinstance(i, Problem) and not i.notice]
    assert lost[0].text.startswith("lost the connection")
    pub.close(), sub.close()


def test_urc_run_publishes_and_urc_listen_records_and_stores(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    address = endpoint(tmp_path)
    results = {}

    def listen():
        results["listen"] = urc_quiet("listen", address, "--batches", "7", "--record", "ev.jsonl",
                                      "--store", "run.urcdb")
    thread = threading.Thread(target=listen)
    thread.start()
    rc, out, err = urc(capsys, "run", str(ROOT / "scenarios" / "tour_hicache.toml"), "--kv-events", address,
                       "--kv-events-wait", "1")
    thread.join(WAIT_MS / 1000 * 4)
    assert rc == 0 and results["listen"] == 0
    view, listened = replay_store("run.urcdb")
    assert listened == address and view.batches == 7 and view.held() == {GPU: 10, CPU: 10}
    assert (tmp_path / "ev.jsonl").read_text().count('"seq":') == view.events


def urc_quiet(*argv):
    from workbench.cli import main

    return main(list(argv) + ["--quiet"])


@pytest.mark.parametrize("argv, said", [
    (("listen", "nowhere"), "needs a tcp://HOST:PORT or ipc://PATH endpoint"),
    (("listen", "tcp://127.0.0.1:0"), "port from 1 to 65535"),
    (("listen", "ipc:///x", "--store", "a.db"), "writes a .urcdb file"),
    (("run", "scenarios/tour.toml", "--kv-events-wait", "1"), "only applies with --kv-events tcp://"),
    (("run", "scenarios/tour.toml", "--kv-events", "tcp://*:x"), "port from 1 to 65535"),
])
def test_bad_endpoints_and_options_are_one_line_and_exit_2(capsys, monkeypatch, argv, said):
    monkeypatch.chdir(ROOT)
    rc, out, err = urc(capsys, *argv)
    assert rc == 2 and said in err and len(err.strip().splitlines()) == 1


def test_a_port_in_use_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    pub = Publisher("tcp://127.0.0.1:*")
    try:
        rc, out, err = urc(capsys, "run", str(ROOT / "scenarios" / "tour.toml"), "--kv-events", pub.endpoint)
    finally:
        pub.close()
    assert rc == 2 and "cannot bind" in err and len(err.strip().splitlines()) == 1


def test_without_the_extra_both_commands_refuse_naming_it(capsys, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "zmq", None)  # import zmq raises ImportError
    for argv in (("listen", "tcp://127.0.0.1:5557"),
                 ("run", str(ROOT / "scenarios" / "tour.toml"), "--kv-events", "tcp://*:5557")):
        rc, out, err = urc(capsys, *argv)
        assert rc == 2 and "pip install 'unified-cache-workbench[kv-events]'" in err
        assert len(err.strip().splitlines()) == 1
