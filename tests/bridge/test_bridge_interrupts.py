"""A Ctrl-C during ``urc run --against sglang`` stops the lockstep between steps: the
step it landed in is run on both sides and compared first, and an interrupt is never
reported as a divergence."""

from __future__ import annotations

import signal

from sglang_util import requires_sglang

pytestmark = requires_sglang()

from cache import UnifiedRadixCache  # noqa: E402
from workbench.cli import main  # noqa: E402
from workbench.model.scenarios.workload import write_trace  # noqa: E402


def test_a_ctrl_c_inside_our_insert_is_no_divergence(tmp_path, monkeypatch, capsys):
    # after an insert that shared a prefix the tree has freed that prefix's duplicate
    # slots: undoing the step there freed them twice, an error SGLang did not raise
    monkeypatch.chdir(tmp_path)
    with open("t.jsonl", "w") as stream:
        write_trace(stream, 40, seed=3)
    original, seen = UnifiedRadixCache.insert, []

    def insert(self, params):
        result = original(self, params)
        if not seen and result.prefix_len > 0:
            seen.append(result)
            signal.raise_signal(signal.SIGINT)
        return result

    monkeypatch.setattr(UnifiedRadixCache, "insert", insert)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # (a background job's is ignored)
    try:
        assert main(["run", "t.jsonl", "--against", "sglang"]) == 130
    finally:
        signal.signal(signal.SIGINT, previous)
    captured = capsys.readouterr()
    assert seen and captured.err.strip().splitlines()[-1] == "urc run: interrupted"
    assert "DIVERGED" not in captured.out and "diverge" not in captured.out.lower()
