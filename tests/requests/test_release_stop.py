"""``release`` with ``stop_at``: a stop that would end a request inside what the tree
already holds of it is refused before anything runs, counting EAGLE's pairs (N of them
span N + 1 tokens), and the step leaves the state as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.model.timeline.runner import run_scenario

SCENARIO = """schema = 1
[scenario]
name = "stop-at"
[config]
components = ["full"]
page_size = 1
kv_size = 48
is_eagle = {eagle}
[[step]]
op = "req_prefill"
req = "r1"
tokens = [1, 2]
[[step]]
op = "req_decode"
req = "r1"
tokens = [3]
[[step]]
op = "checkpoint"
req = "r1"
[[step]]
op = "release"
req = "r1"
stop_at = {stop}
"""


def released(tmp_path: Path, eagle: bool, stop: int):
    path = tmp_path / "stop.toml"
    path.write_text(SCENARIO.format(eagle=str(eagle).lower(), stop=stop))
    return run_scenario(path)


@pytest.mark.parametrize("eagle, stop, refused", [(True, 0, True), (True, 1, False), (False, 0, True),
                                                  (False, 1, False)])
def test_a_stop_inside_what_the_tree_holds_is_refused_and_changes_nothing(tmp_path, eagle, stop, refused):
    timeline = released(tmp_path, eagle, stop)
    record = timeline.records[3]
    if refused:  # the checkpoint holds [1 2 3]: three tokens, or EAGLE's two pairs of them
        assert record.error is not None and "inside the 3 tokens the tree already holds" in record.error
        assert timeline.state_after(4).records == timeline.state_after(3).records
        assert timeline.state_after(4).globals == timeline.state_after(3).globals
    else:
        assert record.error is None and timeline.passed
