"""A Ctrl-C during ``urc run --against sglang`` stops the lockstep between steps: the
step it landed in is run on both sides and compared first, and an interrupt is never
reported as a divergence."""

from __future__ import annotations

import signal

from sglang_util import requires_sglang

pytestmark = requires_sglang()

from signal_util import ctrl_c_raising, inside_an_insert_that_shared_a_prefix  # noqa: E402
from workbench.cli import main  # noqa: E402
from workbench.model.scenarios.workload import write_trace  # noqa: E402


def test_a_ctrl_c_inside_our_insert_is_no_divergence(tmp_path, monkeypatch, capsys):
    """Undoing our insert there freed slots twice, an error SGLang did not raise: it
    was reported as a divergence."""
    monkeypatch.chdir(tmp_path)
    with open("t.jsonl", "w") as stream:
        write_trace(stream, 40, seed=3)
    seen = inside_an_insert_that_shared_a_prefix(monkeypatch, (signal.SIGINT,))
    with ctrl_c_raising():
        assert main(["run", "t.jsonl", "--against", "sglang"]) == 130
    captured = capsys.readouterr()
    assert seen and captured.err.strip().splitlines()[-1] == "urc run: interrupted"
    assert "DIVERGED" not in captured.out and "diverge" not in captured.out.lower()
