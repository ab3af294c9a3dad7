"""The snapshot's ``RequestView``: every running request's row, prefix, lengths, lock,
priority and chunked state, plus each component's own request state through its
``request_extras`` hook — read by the request panel, the request diff and why."""

from __future__ import annotations

from cache.components.base import TreeComponent
from cache.controller.snapshot import global_record, take_snapshot
from workbench.model.scenarios.scenario import scenario_from_records
from workbench.model.timeline.runner import Runner

HYBRID4 = {"components": ["full", "swa", "mamba"], "page_size": 4, "kv_size": 512, "sliding_window": 8,
           "swa_kv_size": 512, "mamba_size": 16}


def runner(config: dict, *steps: dict) -> Runner:
    run = Runner(scenario_from_records({"schema": 1, "scenario": {"name": "t"}, "config": config}, list(steps)))
    timeline = run.run()
    assert timeline.passed and not any(r.error for r in timeline.records)
    return run


def test_a_running_request_is_seen_whole_after_a_checkpoint():
    run = runner(HYBRID4, {"op": "req_prefill", "req": "r1", "tokens": list(range(1, 71))},
                 {"op": "req_decode", "req": "r1", "tokens": [5, 6, 7], "slide_window": True},
                 {"op": "checkpoint", "req": "r1"})
    (view,) = run.timeline.final.requests
    req = run.cache.requests["r1"]
    assert (view.rid, view.tokens, view.prompt_len) == ("r1", 73, 70)
    assert (view.cache_protected_len, view.inserted_len, view.own_len) == (64, 64, 9)
    assert view.lock_node == view.last_node == req.last_node != 0 and view.lock_receipt == req.lock.receipt_id
    assert view.finished_len is None and view.owned_len is None and not view.is_chunked and view.priority == 0
    row = req.kv_indices.tolist()
    assert view.row_ends == (tuple(row[:3]), tuple(row[-3:]))
    assert view.component("swa") == {"evicted_seqlen": 56}  # slid up to a window behind its Mamba checkpoint at 64
    mamba = view.component("mamba")
    assert mamba["running_slot"] == int(req.mamba_pool_idx[0])
    assert mamba["ping_pong"] == tuple(req.mamba_ping_pong.tolist()) and len(mamba["ping_pong"]) == 2
    assert mamba["last_track_seqlen"] is None  # the checkpoint consumed the tracked state
    assert view.component("full") == {}  # Full keeps no request state of its own


def test_the_snapshot_and_the_step_record_agree_and_hold_no_tensors():
    run = runner(HYBRID4, {"op": "req_prefill", "req": "r1", "tokens": list(range(1, 71))})
    (view,) = take_snapshot(run.cache).requests
    assert view == global_record(run.cache).requests[0] == run.timeline.final.requests[0]
    assert view.component("mamba")["last_track_seqlen"] == 64  # tracked at the 64-token grid
    for value in (*view.row_ends[0], *view.row_ends[1],
                  *(v for _, fields in view.components for _, v in fields)):
        assert value is None or isinstance(value, (int, tuple))


def test_a_short_row_is_shown_whole_and_a_stop_shows_the_owned_length():
    run = runner({"components": ["full"], "kv_size": 64}, {"op": "req_prefill", "req": "r", "tokens": [1, 2, 3]})
    req = run.cache.requests["r"]
    assert take_snapshot(run.cache).requests[0].row_ends == (tuple(req.kv_indices.tolist()), ())
    req.output_ids.extend([7, 8])  # what a decode leaves, then a stop after the first output token
    req.finished_len = 1
    view = take_snapshot(run.cache).requests[0]
    assert (view.finished_len, view.owned_len) == (1, min(req.kv_len, 3 + 1))


def test_a_component_shows_its_own_request_state_without_the_snapshot_knowing_it(monkeypatch):
    run = runner({"components": ["full"], "kv_size": 64}, {"op": "req_prefill", "req": "r", "tokens": [1, 2, 3]})
    full = run.cache.components[0]

    class Shown(type(full)):
        def request_extras(self, req) -> dict:
            return {"seen": req.kv_len}

    monkeypatch.setattr(full, "__class__", Shown)
    from cache.tree.hooks import HookTable

    run.cache.hooks = HookTable.of(run.cache.components)
    assert take_snapshot(run.cache).requests[0].components == (("full", (("seen", 3),)),)
    assert TreeComponent.request_extras(full, run.cache.requests["r"]) == {}


# ---- the request diff ------------------------------------------------------------------------------
from workbench.model.timeline.request_diff import ADDED, CHANGED, ENDED, request_diff, step_request_diff  # noqa: E402

STORY = ({"op": "req_prefill", "req": "r1", "tokens": list(range(1, 71))},
         {"op": "req_decode", "req": "r1", "tokens": [5, 6, 7], "slide_window": True},
         {"op": "checkpoint", "req": "r1"},
         {"op": "req_prefill", "req": "r2", "tokens": list(range(1, 67))},
         {"op": "release", "req": "r1"})


def test_each_step_says_what_it_did_to_each_request():
    timeline = runner(HYBRID4, *STORY).timeline
    admitted = step_request_diff(timeline, 1).get("r1")
    assert admitted.status == ADDED and admitted.allocated == {"full": 70}
    assert admitted.lines[0] == "admitted: prefix 0 of a 70-token prompt, lock on #0"
    decode = step_request_diff(timeline, 2).get("r1")
    assert decode.status == CHANGED and decode.field("committed").text == "committed grew 70 → 73 (+3)"
    assert decode.field("swa.evicted_seqlen").after == 56 and decode.freed == {("swa", "window"): 56}
    checkpoint = step_request_diff(timeline, 3).get("r1")
    node = timeline.state_after(3).requests[0].lock_node
    assert checkpoint.field("prefix").text == "prefix grew 0 → 64 (+64)" and not checkpoint.prefix_shrank
    assert checkpoint.field("locked").text == f"lock moved from #0 to #{node}"
    assert checkpoint.field("mamba.last_track_seqlen").before == 64
    other = step_request_diff(timeline, 4)
    assert [c.rid for c in other.changes] == ["r2"]  # r1 untouched by r2's admission is not listed
    ended = step_request_diff(timeline, 5).get("r1")
    assert ended.status == ENDED and ended.after is None
    assert ended.lines[0] == f"ended: it held 9 own slots past a prefix of 64, lock on #{node} released"
    assert ended.freed == {("full", "tail"): 9, ("swa", "tail"): 12}
    assert step_request_diff(timeline, 0).is_empty and step_request_diff(timeline, 99).is_empty


def test_a_shrinking_prefix_and_row_and_a_lock_taken_again_are_named():

    timeline = runner(HYBRID4, *STORY[:3]).timeline
    before = timeline.final.requests[0]
    after = before._replace(tokens=64, cache_protected_len=0, lock_node=0, lock_receipt=9, is_chunked=True,
                    finished_len=2, owned_len=64)
    change = request_diff([before], [after]).get("r1")
    texts = [f.text for f in change.fields]
    assert change.prefix_shrank and "prefix shrank 64 → 0 (-64)" in texts
    assert "9 slots freed from its tail" in texts and "back in chunked prefill" in texts
    assert f"lock moved from #{before.lock_node} to #0" in texts and "stop set after 2 output tokens" in texts
    same_node = before._replace(lock_receipt=before.lock_receipt + 5)
    assert request_diff([before], [same_node]).get("r1").field("locked").text.startswith(
        f"lock on #{before.lock_node} taken again")
    assert request_diff([before], [before]).is_empty


def test_the_text_report_says_what_each_step_did_to_its_requests(capsys):
    from pathlib import Path

    from urc_util import urc

    tour = Path(__file__).resolve().parents[2] / "scenarios" / "tour.toml"
    code, out, _ = urc(capsys, "show", str(tour), "--walk")
    assert code == 0
    lines = [line.strip() for line in out.splitlines() if line.strip().startswith("request r1:")]
    assert lines[0] == "request r1: admitted: prefix 6 of a 9-token prompt, lock on #4; took 3 slots of full"
    assert "request r1: prefix grew 6 → 11 (+5); inserted 0 → 11; lock moved from #4 to #6" in lines
    assert lines[-1].startswith("request r1: ended: it held 0 own slots past a prefix of 11, lock on #6 released")
