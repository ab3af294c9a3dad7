"""urc tui --listen: the live view's panels (the block tree, the batches, the chosen
batch and its violations, the counts) follow the stream as it is pumped; a malformed
message is one line there and the view keeps what it had; a stored listen run opens the
same way."""

from __future__ import annotations

import pytest

zmq = pytest.importorskip("zmq")

from textual.widgets import Static  # noqa: E402

from cache.observe.kv_events import BlockRemoved, BlockStored  # noqa: E402
from urc_util import urc  # noqa: E402
from workbench.model.kv_wire.listener import Listener  # noqa: E402
from workbench.model.kv_wire.live import LiveModel  # noqa: E402
from workbench.model.kv_wire.publisher import Publisher  # noqa: E402
from workbench.model.kv_wire.session import ListenSession  # noqa: E402
from workbench.model.kv_wire.store import ListenStore  # noqa: E402
from workbench.tui.listen_app import ListenApp  # noqa: E402

WAIT_MS = 5000


def text(app, name: str) -> str:
    return str(app.query_one(f"#{name}", Static).render())


def pump_until(session: ListenSession, batches: int, problems: int = 0) -> None:
    while session.view.batches < batches or len(session.view.problems) < problems:
        assert session.pump(WAIT_MS), "nothing arrived"


@pytest.mark.asyncio
async def test_the_live_view_follows_the_stream_and_a_malformed_message_is_one_line(tmp_path):
    pub = Publisher(f"ipc://{tmp_path}/kv.ipc")
    session = ListenSession(Listener(pub.endpoint), store=ListenStore(str(tmp_path / "l.urcdb"), pub.endpoint))
    assert pub.wait_for_subscribers(1, 5)
    app = ListenApp(LiveModel(session.view, pub.endpoint, session))
    async with app.run_test(size=(140, 40)) as pilot:
        assert "no batch yet" in text(app, "step")
        pub.publish([BlockStored([10, 11], None, [1, 2, 3, 4], 2)])
        pub.publish([BlockStored([12], 11, [5, 6], 2, medium="CPU_PINNED"), BlockRemoved([99])])
        pump_until(session, 2)
        app.render_model()
        await pilot.pause()
        assert "GPU 2" in text(app, "counts") and "CPU_PINNED 1" in text(app, "counts")
        assert "000000000000000a"[:8] in text(app, "tree") and "[1 2]" in text(app, "tree")
        assert "batch 1: 2 event(s) +1 CPU_PINNED -1 GPU, 1 violation(s)" in text(app, "batches")
        assert "kv_events.unknown_block" in text(app, "step")
        await pilot.press("left")
        assert text(app, "step").startswith("batch 0: 1 event(s) +2 GPU")
        await pilot.press("m")
        assert text(app, "tree").startswith("CPU_PINNED (1 blocks")
        pub._pub.send_multipart([b"", b"\x00" * 8, b"\xc1not msgpack"])  # a malformed message
        pump_until(session, 2, problems=1)
        app.render_model()
        await pilot.pause()
        assert text(app, "step").rstrip().splitlines()[-1].startswith("malformed batch 0")
        assert "GPU 2" in text(app, "counts")  # the view kept what it had
        await pilot.press("q")
    pub.close()

    app = ListenApp(LiveModel(*_stored(tmp_path / "l.urcdb")))
    async with app.run_test(size=(140, 40)):
        assert "(stored)" in app.title and "GPU 2, CPU_PINNED 1" in text(app, "counts")
        assert "malformed batch 0" in text(app, "step")


def _stored(path):
    from workbench.model.kv_wire.store import replay_store

    view, endpoint = replay_store(str(path))
    return view, str(path)


def test_a_stored_listen_run_prints_its_summary_off_a_terminal_and_a_timeline_reader_points_at_it(tmp_path, capsys):
    store = ListenStore(str(tmp_path / "s.urcdb"), "tcp://x:1")
    store.close()
    rc, out, err = urc(capsys, "tui", "--listen", str(tmp_path / "s.urcdb"))
    assert rc == 0 and "0 batch(es)" in out
    rc, out, err = urc(capsys, "tui", str(tmp_path / "s.urcdb"))
    assert rc == 2 and "urc tui --listen" in err
    rc, out, err = urc(capsys, "tui", "--listen", "tcp://127.0.0.1:5557")
    assert rc == 2 and "use urc listen" in err
