"""A streaming turn that decodes past its max_new_tokens (spec decoding's overshoot):
the session's record is cut at the cap, as SGLang 0.5.23's release cuts it.

With Full only, the next turn borrows just the history it holds (the scenario
``scenarios/against/streaming-turn-ends-at-max-new-tokens.toml``). With Mamba, SGLang
cuts the record's KV but not its Mamba state; ours follows, and the checker flags the
state on a path it was not taken at (data/streaming-overshoot-keeps-mamba-state.toml).
The fuzzer keeps Mamba turns within their cap so that sweeps do not stop there."""

from __future__ import annotations

from pathlib import Path

from urc_util import run_json
from workbench.model.fuzzing.config import FuzzConfig
from workbench.model.fuzzing.generator import OpGenerator
from workbench.model.ops.requests import _decoding, fuzz_decode, length_capped

DATA = Path(__file__).resolve().parent / "data"
ROOT = Path(__file__).resolve().parents[2]


def test_the_finished_length_is_capped_at_max_new_tokens():
    assert length_capped(None, 3, None) is None  # no cap: the output's length
    assert length_capped(None, 2, 2) is None  # at the cap: nothing to cut
    assert length_capped(None, 3, 0) == 0  # past it: check_finished ends at the cap
    assert length_capped(5, 7, 4) == 4  # a stop past the cap is capped
    assert length_capped(1, 7, 4) == 1  # a stop before it stands


def test_a_full_turn_past_its_cap_leaves_the_record_at_the_cap(capsys):
    rc, [run] = run_json(capsys, str(ROOT / "scenarios/against/streaming-turn-ends-at-max-new-tokens.toml"))
    assert rc == 0
    release, turn = run["steps"][3], run["steps"][4]
    assert any(e["kind"] == "free" and e["cause"] == "stop" and e["tokens"] == 1 for e in release["events"])
    assert turn["result"]["prefix_len"] == 2


def test_a_mamba_turn_past_its_cap_is_flagged_where_its_state_lands(capsys):
    rc, [run] = run_json(capsys, str(DATA / "streaming-overshoot-keeps-mamba-state.toml"))
    assert rc == 1
    *before, last = run["steps"]
    assert not any(step["violations"] or step["failures"] for step in before)
    assert [v["name"] for v in last["violations"]] == ["mamba.state_boundary"]


def test_the_fuzzer_keeps_a_mamba_turn_within_its_cap():
    gen = OpGenerator(FuzzConfig(components=("full", "mamba"), page_size=4), seed=3)
    gen.running, gen.computed, gen.outputs = ["t1"], {"t1": 8}, {"t1": 1}
    gen.output_cap = {"t1": 2}
    for _ in range(20):
        gen.outputs["t1"] = 1
        assert len(fuzz_decode(gen)["tokens"]) == 1
    gen.outputs["t1"] = 2
    assert _decoding(gen) == []
    full = OpGenerator(FuzzConfig(components=("full",), page_size=4), seed=3)  # Full: the overshoot is cut at release
    full.running, full.computed, full.outputs, full.output_cap = ["t1"], {"t1": 8}, {"t1": 2}, {"t1": 2}
    assert _decoding(full) == ["t1"]
