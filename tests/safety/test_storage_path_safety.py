"""A scenario file is untrusted (shared as a bug report): its storage path never makes
the file backend write or delete anything. The backend owns only a directory it created
and marked; a scenario's pages go to a private temporary directory removed however the
command ends, or to the one ``--storage-dir`` names; a bad ``--storage-dir`` is one line,
exit 2, with nothing created or removed. The bridge's store directories go too."""

from __future__ import annotations

import gc
import os
import tempfile
from pathlib import Path

import pytest

from urc_util import urc

from cache.basics.errors import StorageDirError
from cache.tiers.backends import FileBackend
from cache.tiers.backends.owned_dir import MARKER

ROOT = Path(__file__).resolve().parents[2]
BACKUP = (ROOT / "scenarios" / "storage_backup.toml").read_text()
MEMORY = 'storage = { backend = "memory" }'
WEIGHTS = {"pytorch_model.bin": b"\x00weights\xff" * 100, ".cache.tmp": b"half a download"}


def scenario(name: str = "s.toml", storage: str = '{ backend = "file" }', text: str = BACKUP) -> str:
    """storage_backup.toml (pages reach storage at its flushes) with another storage table."""
    assert MEMORY in text
    Path(name).write_text(text.replace(MEMORY, f"storage = {storage}"))
    return name


def weights(folder: Path) -> dict[str, bytes]:
    folder.mkdir(exist_ok=True)
    for name, data in WEIGHTS.items():
        (folder / name).write_bytes(data)
    return {name: (folder / name).read_bytes() for name in WEIGHTS}


def contents(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def one_line(err: str, says: str) -> None:
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert says in err, err


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """The system temporary directory, seen empty: what a run leaves there shows."""
    folder = tmp_path / "system-tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def left_in(folder: Path, prefix: str) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(prefix))


# ---- a path in the scenario file is ignored ---------------------------------------------


@pytest.mark.parametrize("command", [("run",), ("show", "--step", "0"), ("svg", "-o", "out.svg")])
def test_a_scenario_path_deletes_nothing(capsys, tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    before = weights(tmp_path / "weights")
    rc, out, err = urc(capsys, *command, scenario(storage='{ backend = "file", path = "weights" }'))
    assert rc == 0, err
    assert "storage path in the file is ignored; pass --storage-dir to keep pages" in err
    assert contents(tmp_path / "weights") == before and not (tmp_path / "weights" / MARKER).exists()


def test_a_scenario_path_of_the_working_directory_deletes_nothing(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = weights(tmp_path)
    rc, out, err = urc(capsys, "run", scenario(storage='{ backend = "file", path = "." }'))
    assert rc == 0, err
    assert {name: data for name, data in contents(tmp_path).items() if name in WEIGHTS} == before
    assert sorted(os.listdir(tmp_path)) == sorted([*WEIGHTS, "s.toml"])


def test_a_scenario_path_through_a_symlink_writes_nothing_there(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    rc, out, err = urc(capsys, "run", scenario(storage='{ backend = "file", path = "link/pages" }'))
    assert rc == 0, err
    assert os.listdir(tmp_path / "elsewhere") == []


# ---- the private temporary directory ---------------------------------------------------------


@pytest.fixture
def backend_dirs(monkeypatch):
    """Every directory a file backend opened."""
    opened, real_init = [], FileBackend.__init__

    def init(self, path, *args, **kwargs):
        opened.append(path)
        real_init(self, path, *args, **kwargs)

    monkeypatch.setattr(FileBackend, "__init__", init)
    return opened


def test_the_private_directory_is_removed_after_a_run(capsys, tmp_path, monkeypatch, private_tmp, backend_dirs):
    monkeypatch.chdir(tmp_path)
    rc, out, err = urc(capsys, "run", scenario())
    assert rc == 0, err
    assert len(backend_dirs) == 1 and Path(backend_dirs[0]).is_relative_to(private_tmp)
    assert left_in(private_tmp, "urc-storage-") == [] and not os.path.exists(backend_dirs[0])


@pytest.mark.parametrize("how", ["failed-step", "interrupted", "error"])
def test_the_private_directory_is_removed_after_a_run_that_fails(capsys, tmp_path, monkeypatch, private_tmp,
                                                                 backend_dirs, how):
    monkeypatch.chdir(tmp_path)
    argv = ["run", scenario()]
    if how == "failed-step":
        failing = '\n[[step]]\nop = "flush"\nexpect = { completed = 99 }\n'
        Path("s.toml").write_text(Path("s.toml").read_text() + failing)
    else:  # Ctrl-C, or a bug in urc, once the cache is built
        import workbench.model.timeline.runner as runner

        def stopped(self):
            raise KeyboardInterrupt if how == "interrupted" else RuntimeError("a bug")

        monkeypatch.setattr(runner.Runner, "step", stopped)
    rc, out, err = urc(capsys, *argv)
    assert rc == {"failed-step": 1, "interrupted": 130, "error": 3}[how], err
    assert len(backend_dirs) == 1
    assert left_in(private_tmp, "urc-storage-") == []


# ---- --storage-dir -------------------------------------------------------------------------------


def test_storage_dir_creates_a_marked_directory_that_keeps_the_pages(capsys, tmp_path, monkeypatch, private_tmp):
    monkeypatch.chdir(tmp_path)
    rc, out, err = urc(capsys, "run", "--storage-dir", "pages", scenario())
    assert rc == 0, err
    stored = sorted(p.name for p in (tmp_path / "pages").iterdir())
    assert stored[0] == MARKER and len(stored) > 1 and all(name.endswith(".bin") for name in stored[1:])
    assert left_in(private_tmp, "urc-storage-") == []
    rc, out, err = urc(capsys, "run", "--storage-dir", "pages", scenario())  # reopened: its own, so taken
    assert rc in (0, 1) and "--storage-dir" not in err, err
    assert sorted(p.name for p in (tmp_path / "pages").iterdir()) == stored


def test_storage_dir_in_the_tui_walk_keeps_the_pages(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = urc(capsys, "tui", "--storage-dir", "pages", scenario())
    assert rc == 0, err
    assert (tmp_path / "pages" / MARKER).is_file() and any(p.suffix == ".bin" for p in (tmp_path / "pages").iterdir())


def test_storage_dir_refuses_a_directory_it_did_not_make(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = weights(tmp_path / "weights")
    rc, out, err = urc(capsys, "run", "--storage-dir", "weights", scenario())
    assert rc == 2
    one_line(err, "--storage-dir: file storage path 'weights' is a directory urc did not create")
    assert contents(tmp_path / "weights") == before
    with pytest.raises(StorageDirError, match="did not create"):  # the backend itself, too
        FileBackend(str(tmp_path / "weights"))
    assert contents(tmp_path / "weights") == before


@pytest.mark.parametrize("target, says", [
    ("notes.txt", " exists and is not a directory"),
    ("link/pages", " goes through a symlink"),
    ("link", " goes through a symlink"),
    ("missing/pages", ": its parent directory does not exist"),
])
def test_a_bad_storage_dir_is_one_line_and_changes_nothing(capsys, tmp_path, monkeypatch, target, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("precious")
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    before = sorted([*os.listdir(tmp_path), scenario()])
    rc, out, err = urc(capsys, "run", "--storage-dir", target, "s.toml")
    assert rc == 2
    one_line(err, f"urc run: --storage-dir: file storage path {target!r}{says}")
    assert sorted(os.listdir(tmp_path)) == before and os.listdir(tmp_path / "real") == []
    assert (tmp_path / "notes.txt").read_text() == "precious"


def test_a_symlinked_marked_directory_is_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    FileBackend(str(tmp_path / "mine"))
    (tmp_path / "link").symlink_to(tmp_path / "mine")
    rc, out, err = urc(capsys, "run", "--storage-dir", "link", scenario())
    assert rc == 2
    one_line(err, "goes through a symlink")
    assert os.listdir(tmp_path / "mine") == [MARKER]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_an_unwritable_storage_dir_is_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    FileBackend(str(tmp_path / "mine"))
    (tmp_path / "mine").chmod(0o500)
    try:
        rc, out, err = urc(capsys, "run", "--storage-dir", "mine", scenario())
    finally:
        (tmp_path / "mine").chmod(0o700)
    assert rc == 2
    one_line(err, "is not writable")


def test_a_storage_dir_refused_only_when_the_cache_is_built_is_still_exit_2(capsys, tmp_path, monkeypatch):
    """Taken after the check, before the build: the cache's refusal is bad input too."""
    import workbench.model.scenarios.storage_place as place

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(place, "check_storage_dir", os.path.abspath)
    Path("notes.txt").write_text("precious")
    rc, out, err = urc(capsys, "run", "--storage-dir", "notes.txt", scenario())
    assert rc == 2
    one_line(err, "exists and is not a directory")
    assert Path("notes.txt").read_text() == "precious"


def test_storage_dir_takes_one_scenario(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = urc(capsys, "run", "--storage-dir", "pages", scenario("a.toml"), scenario("b.toml"))
    assert rc == 2
    one_line(err, "--storage-dir takes exactly one scenario file")
    assert not (tmp_path / "pages").exists()


# ---- the bridge's store directories --------------------------------------------------------------


BRIDGE_CONFIG = {"components": ["full"], "kv_size": 32, "page_size": 4,
                 "hicache": {"write_policy": "write_through", "storage": {"backend": "file"}}}


def test_a_bridge_host_tier_that_fails_to_build_leaves_no_store(private_tmp):
    """Without SGLang its import fails; with it the stand-in cache does: either way the
    directory made for its store is gone at once, not when collected."""
    from types import SimpleNamespace

    from workbench.bridge.sglang_host import HostTier

    with pytest.raises(Exception):
        HostTier(SimpleNamespace(cache=SimpleNamespace()), None, None, BRIDGE_CONFIG)
    assert left_in(private_tmp, "urc-bridge-storage-") == []


def test_a_forgotten_store_side_is_removed_when_collected(private_tmp):
    from workbench.bridge.sglang_storage import StorageSide

    side = StorageSide(BRIDGE_CONFIG)
    assert left_in(private_tmp, "urc-bridge-storage-") != []
    del side
    gc.collect()
    assert left_in(private_tmp, "urc-bridge-storage-") == []


@pytest.mark.parametrize("outcome", ["agrees", "bridge-error", "interrupted"])
def test_a_bridge_run_leaves_no_store_behind(private_tmp, monkeypatch, outcome):
    """``run_against`` with SGLang's side stood in for (its storage side real): the store
    directory goes however the run ends."""
    import workbench.bridge.differential as differential
    from workbench.bridge.sglang_env import BridgeError
    from workbench.bridge.sglang_host import HostTier
    from workbench.bridge.sglang_side import SGLangSide
    from workbench.bridge.sglang_storage import StorageSide
    from workbench.model.scenarios.scenario import load_scenario

    error = {"agrees": None, "bridge-error": BridgeError("stand-in"), "interrupted": KeyboardInterrupt()}[outcome]

    class StandIn(SGLangSide):
        def __init__(self, config):
            self.host = HostTier.__new__(HostTier)
            self.host.storage = StorageSide(config)
            self.inspectable = True

        def run(self, op, fields):
            if error is not None:
                raise error
            return {}

    monkeypatch.setattr(differential, "check_version", lambda allow: "stand-in")
    monkeypatch.setattr(SGLangSide, "for_scenario", classmethod(lambda cls, s, *a: StandIn(s.config)))
    path = private_tmp.parent / "bridge.toml"
    path.write_text(BACKUP)
    if error is None:
        differential.run_against(load_scenario(path))  # (the stand-in's answers differ: a divergence, not an error)
    else:
        with pytest.raises(type(error)):
            differential.run_against(load_scenario(path))
    assert left_in(private_tmp, "urc-bridge-storage-") == [] and left_in(private_tmp, "urc-storage-") == []
