"""A stored run's indexes of event kinds and names: a breakpoint on a kind
(``event=split``, ``event=cascade component=swa``), an op or a request (``op=insert``,
``req=r3``) is answered from them, and finds exactly the steps that reading every
record finds: for ``c`` / ``C`` and for the charts' markers."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.model.debugging.breakpoints import parse_conditions
from workbench.model.scenarios.scenario import load_scenario
from workbench.model.timeline.step_index import KINDS
from workbench.model.timeline.runner import run_scenario
from workbench.model.timeline.search import quick, search
from workbench.model.timeline.series import RunSeries
from workbench.model.timeline.store_run import run_to_store

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("tour_swa.toml", "tour_mamba.toml", "tour_hicache_hybrid.toml")


@pytest.fixture(scope="module", params=SOURCES)
def runs(request, tmp_path_factory):
    """The scenario stored, and run in memory (its steps read one by one)."""
    source = str(ROOT / "scenarios" / request.param)
    store = run_to_store(source, str(tmp_path_factory.mktemp("idx") / "run.urcdb"))
    yield store, run_scenario(load_scenario(source))
    store.close()


def _conditions(memory, components):
    texts = [f"event={k}" for k in KINDS] + [f"event={k} component={c}" for k in KINDS for c in components]
    texts += ["event=cascade", "event=split op=insert", "event=evict cause=cascade", "req=no-such-request"]
    steps = [r.step for r in memory.records]
    texts += sorted({f"op={s.op}" for s in steps} | {"op=req_finish", "op=insert event=split"})
    texts += sorted({f"req={s.fields['req']}" for s in steps if isinstance(s.fields.get("req"), str)})
    texts += [t + " error" for t in texts if t.startswith("req=")][:3]
    return [(text, parse_conditions([text], components)) for text in texts]


def test_each_kind_and_name_is_found_at_the_same_steps_as_reading_every_record(runs):
    store, memory = runs
    components = memory.store.shape.components
    found_any = 0
    for text, conditions in _conditions(memory, components):
        by_reading = [i for i in range(1, len(memory) + 1) if conditions[0].holds(memory, i)]
        assert quick(store, conditions), text
        forward, at = [], 0
        while (hit := search(store, conditions, at)) is not None:
            forward.append(at := hit[0])
        assert forward == by_reading, text
        backward, at = [], len(store) + 1
        while (hit := search(store, conditions, at, forward=False)) is not None:
            backward.append(at := hit[0])
        assert backward == by_reading[::-1], text
        found_any += bool(by_reading)
    assert found_any >= 12  # the tours split, evict, cascade, lock, name requests …: the indexes are not empty


def test_the_charts_mark_the_same_steps_from_the_index(runs):
    store, memory = runs
    components = memory.store.shape.components
    conditions = parse_conditions(["event=split", "event=cascade component=" + components[-1]], components)
    from_index = RunSeries(store, conditions)
    by_reading = RunSeries(memory, conditions)
    assert from_index.breakpoints and from_index._breaks == by_reading._breaks
    assert from_index._breaks  # something to mark


def test_a_kind_with_a_counter_condition_is_answered_at_once_too(runs):
    store, memory = runs
    components = memory.store.shape.components
    conditions = parse_conditions([f"{components[0]}_available<0", "event=split"], components)
    assert quick(store, conditions)
    series = RunSeries(store)
    hit = search(store, conditions, 0, series=series)
    first_split = next(i for i in range(1, len(memory) + 1) if conditions[1].holds(memory, i))
    assert hit is not None and hit[0] == first_split and hit[1] is conditions[1]


def test_a_condition_no_index_answers_leaves_the_indexes_unread(runs, monkeypatch):
    """A scan asks chunk after chunk: with one condition that must be read step by step,
    no index is read for the others (a 10⁶-step index read per 512-step chunk)."""
    store, memory = runs
    components = memory.store.shape.components
    reads = []
    kinds = store.store.steps_with_event
    monkeypatch.setattr(store.store, "steps_with_event", lambda *a: reads.append(a) or kinds(*a))
    conditions = parse_conditions(["event=split", "node=1"], components)
    assert not quick(store, conditions)
    hit = search(store, conditions, 0)
    by_reading = next((i for i in range(1, len(memory) + 1) if any(c.holds(memory, i) for c in conditions)), None)
    assert (hit[0] if hit else None) == by_reading and reads == []


def test_the_failing_steps_are_read_off_an_index_not_a_scan_of_every_step(runs):
    """The default breakpoints, the charts' failure marks and ``passed`` ask for the
    failing steps; on a 10⁶-step store a scan of the steps read 3.8 GB (1–2.5 s)."""
    store, _ = runs
    plan = store.store.file.db.execute("EXPLAIN QUERY PLAN SELECT idx FROM steps WHERE passed = 0 ORDER BY idx")
    assert any("USING INDEX failing" in row[-1] for row in plan.fetchall())
