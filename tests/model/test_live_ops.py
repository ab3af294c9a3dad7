"""The TUI's command bar language (workbench/model/scenarios/live.py): parsing, its inverse,
completion, and a live op run at the end of a loaded timeline."""

from __future__ import annotations

import json
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from workbench.model.debugging.cursor import TimelineCursor
from workbench.model.scenarios.live import OP_HELP, complete, parse_command
from workbench.model.scenarios.live_format import format_command
from workbench.model.ops import OPS
from workbench.model.scenarios.scenario import ScenarioError, StepAppender, load_scenario
from workbench.model.scenarios.step import MAX_KEY_TOKENS

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "scenarios").glob("**/*.toml"))


def strict(value) -> str:
    """Equality that tells True from 1 (plain == does not)."""
    return json.dumps(value, sort_keys=True)


# ---- parsing each op form -------------------------------------------------------------------------

@pytest.mark.parametrize("text, raw", [
    ("insert 1 2 3 4", {"op": "insert", "key": [1, 2, 3, 4]}),
    ("insert 1 2 extra_key=ns", {"op": "insert", "key": [1, 2], "extra_key": "ns"}),
    ("insert swa_evicted_seqlen=4 1 2", {"op": "insert", "key": [1, 2], "swa_evicted_seqlen": 4}),
    ("match 1 2 as m1", {"op": "match", "key": [1, 2], "as": "m1"}),
    ("match 1 2", {"op": "match", "key": [1, 2]}),
    ("lock m1 as L1", {"op": "lock", "match": "m1", "as": "L1"}),
    ("unlock L1", {"op": "unlock", "lock": "L1"}),
    ("release_window L1", {"op": "release_window", "lock": "L1"}),
    ("evict swa=4", {"op": "evict", "swa": 4}),
    ("evict full=8 mamba=1", {"op": "evict", "full": 8, "mamba": 1}),
    ("evict", {"op": "evict"}),
    ("req_prefill r1 1 2 3", {"op": "req_prefill", "req": "r1", "tokens": [1, 2, 3]}),
    ("req_decode r1 5 6", {"op": "req_decode", "req": "r1", "tokens": [5, 6]}),
    ("req_decode r1 5 6 slide", {"op": "req_decode", "req": "r1", "tokens": [5, 6], "slide_window": True}),
    ("req_decode r1 5 slide_window=true 6", {"op": "req_decode", "req": "r1", "tokens": [5, 6], "slide_window": True}),
    ("req_chunk r1", {"op": "req_chunk", "req": "r1"}),
    ("req_finish r1", {"op": "req_finish", "req": "r1"}),
    ("req_finish r1 insert=false", {"op": "req_finish", "req": "r1", "insert": False}),
    ("req_finish r1 noinsert", {"op": "req_finish", "req": "r1", "insert": False}),
    ("release r1 noinsert", {"op": "release", "req": "r1", "insert": False}),
    ("checkpoint r1", {"op": "checkpoint", "req": "r1"}),
    ("session_open s1 streaming", {"op": "session_open", "session": "s1", "streaming": True}),
    ("stream_turn t1 5 6 session=t", {"op": "stream_turn", "req": "t1", "tokens": [5, 6], "session": "t"}),
    ("release r1 abort", {"op": "release", "req": "r1", "abort": True}),
    # session state: a list of session ids, an empty table, a table in a table
    ("session_reap expect sessions_open=[s1,t] session_leaves.s1={} session_slots.t.borrowed_by=[t2] "
     "session_slots.t.kv_committed_len=6",
     {"op": "session_reap", "expect": {"sessions_open": ["s1", "t"], "session_leaves": {"s1": {}},
                                       "session_slots": {"t": {"borrowed_by": ["t2"], "kv_committed_len": 6}}}}),
    ("check", {"op": "check"}),
    ("  check\t ", {"op": "check"}),
])
def test_each_op_form(text, raw):
    assert strict(parse_command(text)) == strict(raw)


def test_ranges_expand_inclusive_and_mix_with_ids():
    assert parse_command("insert 1..8")["key"] == list(range(1, 9))
    assert parse_command("insert 0 5..7 3 9..9")["key"] == [0, 5, 6, 7, 3, 9]
    assert parse_command("req_prefill r 1..3")["tokens"] == [1, 2, 3]


def test_expect_clause_and_text_clauses():
    assert parse_command("match 1 2 as m expect prefix_len=2 nodes=3") == {
        "op": "match", "key": [1, 2], "as": "m", "expect": {"prefix_len": 2, "nodes": 3}}
    assert parse_command("check expect full_lock_ref.m=1 full_lock_ref.w=0 swa_lock_ref.m=2")["expect"] == {
        "full_lock_ref": {"m": 1, "w": 0}, "swa_lock_ref": {"m": 2}}
    assert parse_command('unlock L expect_error "not held"') == {"op": "unlock", "lock": "L", "expect_error": "not held"}
    assert parse_command("unlock L expect_error held")["expect_error"] == "held"
    assert parse_command('check description "a \\"quoted\\" line\\nand more"')["description"] == 'a "quoted" line\nand more'


def test_values_are_typed_by_field_and_quoting_makes_a_literal():
    # a name field keeps digits as a string; a quoted value is never an int or a boolean
    assert parse_command("lock 5 as 7") == {"op": "lock", "match": "5", "as": "7"}
    assert parse_command("insert 1 extra_key=42")["extra_key"] == "42"
    assert strict(parse_command('evict swa="4"')["swa"]) == strict("4")
    assert strict(parse_command("req_finish r insert=true")["insert"]) == "true"
    # a quoted word is a literal name, not the keyword it spells
    assert parse_command('lock "as" as "expect"') == {"op": "lock", "match": "as", "as": "expect"}
    assert parse_command("lock 'my match' as L")["match"] == "my match"


def test_shape_and_type_errors_are_left_to_the_appender():
    # these parse; StepAppender refuses them with the scenario loader's message
    assert parse_command("evict swa=-1") == {"op": "evict", "swa": -1}
    assert parse_command("evict swa=lots") == {"op": "evict", "swa": "lots"}
    assert parse_command("lock") == {"op": "lock"}
    assert parse_command("insert 1 bogus=3")["bogus"] == 3
    appender = StepAppender(load_scenario(ROOT / "scenarios/tour.toml"))
    with pytest.raises(ScenarioError, match=r"must be a non-negative int \(field 'swa'\)"):
        appender.check(parse_command("evict swa=lots"))
    with pytest.raises(ScenarioError, match="unknown field 'bogus' for op 'insert'"):
        appender.check(parse_command("insert 1 bogus=3"))


@pytest.mark.parametrize("text, message", [
    ("", "empty command; start with an op: insert, match, lock"),
    ("   ", "empty command"),
    ("foo 1 2", "unknown op 'foo'; known: " + ", ".join(OPS)),
    ("insert 1 x 3", 'token ids must be non-negative ints below 2**31 (got "x")'),
    ("insert 1 -2", "token ids must be non-negative ints below 2**31 (got -2)"),
    ("insert 2147483648", "token ids must be non-negative ints below 2**31 (got 2147483648)"),
    ("insert 1..2147483648", "token ids must be non-negative ints below 2**31 (got 2147483648)"),
    ('insert "3"', 'token ids must be non-negative ints below 2**31 (got "3")'),
    ("insert 1..", "a range is FIRST..LAST, two token ids (got '1..')"),
    ("insert 8..1", "range '8..1' runs backwards"),
    ("insert 0..2000000", f"2,000,001 tokens is more than the {MAX_KEY_TOKENS:,} a key may hold"),
    ("match 1 2 as", "missing a name after 'as'; usage: match TOKENS…"),
    ("lock m1 as", "missing a name after 'as'; usage: lock MATCH as NAME"),
    ("unlock L expect_error", "missing a text"),
    ("lock m1 L2", "unexpected 'L2'; usage: lock MATCH as NAME"),
    ("evict 4", "unexpected '4'; usage: evict [COMPONENT=N]"),
    ("match 1 as a as b", "'as' is given twice"),
    ("evict swa=1 swa=2", "'swa' is given twice"),
    ("insert key=1,2", "write the tokens as words after the op, not key="),
    ("evict swa.m=1", "FIELD.MATCH=N goes in the expect clause"),
    ("evict =3", "an option is FIELD=VALUE (got '=3')"),
    ("check expect nodes", "after 'expect' write FIELD=N (got 'nodes')"),
    ("check expect nodes=1 nodes=2", "expect 'nodes' is given twice"),
    ("check expect full_lock_ref=1 full_lock_ref.m=1", "expect full_lock_ref.m is given twice"),
    ('lock "m1 as L', 'unclosed " quote (column 6)'),
    ("insert " + "7" * 20, f'(got {"7" * 20})'),
    ("insert " + "x" * 300, '(got "' + "x" * 39 + "… (302 chars))"),
    ("foo" + "o" * 300, "o… (305 chars); known: insert"),
])
def test_errors_name_the_problem(text, message):
    with pytest.raises(ScenarioError) as info:
        parse_command(text)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_live_errors_read_as_the_tui_shows_them():
    """No "line 0" for a name a live op defined, and the field named without file:line."""
    appender = StepAppender(load_scenario(ROOT / "scenarios/tour.toml"))
    appender.append(parse_command("match 1 as live_m"))
    with pytest.raises(ScenarioError) as info:
        appender.check(parse_command("match 2 as live_m"))
    assert info.value.brief == ("match name 'live_m' is already taken (named by a live op); give each match its own "
                                "name (field 'as')")
    with pytest.raises(ScenarioError) as info:
        appender.check(parse_command("evict full=-3"))
    assert info.value.brief == "must be a non-negative int (field 'full')"


def test_a_range_just_at_the_limit_is_accepted():
    assert len(parse_command(f"insert 1..{MAX_KEY_TOKENS}")["key"]) == MAX_KEY_TOKENS
    with pytest.raises(ScenarioError, match="tokens is more than"):
        parse_command(f"insert 0 1..{MAX_KEY_TOKENS}")


# ---- the inverse ----------------------------------------------------------------------------------

def bundled_steps():
    for path in SCENARIOS:
        for step in load_scenario(path).steps:
            yield pytest.param(step.raw, id=f"{path.stem}:{step.index}")


@pytest.mark.parametrize("raw", list(bundled_steps()))
def test_every_bundled_step_round_trips(raw):
    """Nothing is excluded: the grammar has description and expect_error clauses and
    per-match expect tables (FIELD.MATCH=N), so every field of every step is compared."""
    assert strict(parse_command(format_command(raw))) == strict(raw)


def test_format_is_one_line_and_compacts_runs():
    assert format_command({"op": "insert", "key": [1, 2, 3, 4, 9, 10, 12]}) == "insert 1..4 9 10 12"
    assert format_command({"op": "req_finish", "req": "r", "insert": False}) == "req_finish r noinsert"
    assert format_command({"op": "lock", "match": "as", "as": "my lock"}) == 'lock "as" as "my lock"'
    line = format_command({"op": "check", "description": 'two\nlines "quoted"'})
    assert line == 'check description "two\\nlines \\"quoted\\""'
    assert format_command({"op": "evict", "swa": "4"}) == 'evict swa="4"'


@pytest.mark.parametrize("raw", [
    {"op": "nope"},
    {"op": "insert"},  # no key: the command form always has one
    {"op": "insert", "key": [1, "2"]},
    {"op": "req_decode", "tokens": [1]},  # the first token would read as the request name
    {"op": "lock", "match": 3, "as": "L"},
    {"op": "check", "expect": {"nodes": None}},
    {"op": "check", "expect": {"full_evict_order": ["[1] extra_key=a"]}},  # a list item cannot be quoted
    {"op": "check", "bad field": 1},
])
def test_format_refuses_dicts_no_command_stands_for(raw):
    with pytest.raises(ValueError):
        format_command(raw)


# ---- fuzzing: user text only ever parses or raises ScenarioError --------------------------------

WORDS = st.one_of(
    st.sampled_from(list(OPS) + ["as", "expect", "expect_error", "description", "slide", "noinsert", "..", "=",
                                 "full=", "swa=1", "insert=false", "slide_window=true", "x.y=1", '"', "'", '""', "\\"]),
    st.integers(-3, 2**31 + 3).map(str),
    st.tuples(st.integers(0, 40), st.integers(0, 40)).map(lambda r: f"{r[0]}..{r[1]}"),
    st.text(alphabet='ab.=:"\'\\ 1', max_size=6),
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(["full", "swa", "as", "req", "nodes", "full_lock_ref.m"]),
              st.sampled_from(["1", "-1", "true", "x", '"q r"', ""])),
)
COMMANDS = st.one_of(
    st.text(max_size=60),
    st.lists(WORDS, max_size=10).map(" ".join),
    st.tuples(st.sampled_from(list(OPS)), st.lists(WORDS, max_size=8)).map(lambda t: " ".join([t[0], *t[1]])),
)
FUZZ = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TOUR_SWA = load_scenario(ROOT / "scenarios/tour_swa.toml")


@FUZZ
@given(COMMANDS)
def test_fuzz_parse_raises_only_scenario_errors_and_round_trips(text):
    try:
        raw = parse_command(text)
    except ScenarioError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert strict(parse_command(format_command(raw))) == strict(raw)


@FUZZ
@given(COMMANDS)
def test_fuzz_the_appender_refuses_a_parsed_command_only_with_scenario_errors(text):
    try:
        raw = parse_command(text)
    except ScenarioError:
        return
    try:
        StepAppender(TOUR_SWA).check(raw)
    except ScenarioError:
        pass


# ---- completion -----------------------------------------------------------------------------------

NAMES = {"matches": ["m1", "m2", "head"], "locks": ["L1"], "requests": ["r1", "r2"]}


def test_first_word_completes_ops_valid_for_the_components():
    full = complete("", NAMES, ["full"])
    assert "release_window" not in full and full == sorted(full) and "insert" in full
    assert "release_window" in complete("", NAMES, ["full", "swa"])
    assert complete("req_", NAMES, ["full"]) == ["req_decode", "req_extend", "req_prefill"]  # not the older names
    assert complete("re", NAMES, ["full", "swa"]) == ["release", "release_window", "req_decode", "req_extend", "req_prefill",
                                                      "restore", "retract"]
    assert complete("nosuch", NAMES, ["full"]) == []


@pytest.mark.parametrize("text, expected", [
    ("lock ", ["head", "m1", "m2"]),
    ("lock m", ["m1", "m2"]),
    ("lock m1 ", ["as"]),
    ("lock m1 as ", []),
    ("lock m1 as L1 ", []),
    ("unlock ", ["L1"]),
    ("release_window ", ["L1"]),
    ("unlock L1 ", []),
    ("req_decode ", ["r1", "r2"]),
    ("req_chunk r", ["r1", "r2"]),
    ("req_finish ", ["r1", "r2"]),
    ("req_finish r1 ", ["abort", "noinsert"]),
    ("req_decode r1 5 ", ["slide"]),
    ("req_decode r1 5 slide ", []),
    ("req_prefill ", []),
    ("match 1 2 ", ["as"]),
    ("match 1 2 a", ["as"]),
    ("match 1 2 as ", []),
    ("match ", []),
    ("insert 1 2 ", []),
    ("evict ", ["full=", "swa="]),
    ("evict s", ["swa="]),
    ("evict full=3 ", ["swa="]),
    ("unlock L1 expect_error ", []),
])
def test_completion_after_an_op(text, expected):
    assert complete(text, NAMES, ["full", "swa"]) == expected


def test_evict_offers_only_configured_components_and_expect_offers_fields():
    assert complete("evict ", NAMES, ["full", "mamba"]) == ["full=", "mamba="]
    assert complete("req_decode r1 5 ", NAMES, ["full"]) == []  # sliding the window needs swa
    fields = complete("match 1 expect ", NAMES, ["full"])
    assert "prefix_len=" in fields and "nodes=" in fields
    assert not [f for f in fields if f.startswith(("swa_", "mamba_"))]
    assert complete("match 1 expect prefix_len=1 prefix", NAMES, ["full"]) == []
    assert "mamba_branching_seqlen=" in complete("match 1 expect m", NAMES, ["full", "mamba"])


def test_every_op_has_a_one_line_usage_starting_with_its_name():
    assert set(OP_HELP) == set(OPS)
    for op, usage in OP_HELP.items():
        assert usage.split()[0] == op and "\n" not in usage


def test_usage_examples_parse():
    """The usage lines, with placeholders filled in, are commands that parse."""
    fill = {"TOKENS…": "1 2", "MATCH": "m", "NAME": "n", "LOCK": "L", "REQ": "r", "NS": "ns", "SALT": "salt", "N": "1", "SID": "s1"}
    for usage in OP_HELP.values():
        words = []
        for word in usage.replace("[", "").replace("]", "").split():
            name, eq, value = word.partition("=")
            words.append(f"{name}={fill[value]}" if eq else fill.get(word, word))
        parse_command(" ".join(words))


# ---- a live op at the end of a loaded timeline ----------------------------------------------------

def test_a_live_op_runs_at_the_end_and_a_refused_one_changes_nothing():
    cursor = TimelineCursor([load_scenario(ROOT / "scenarios/tour_swa.toml")])
    cursor.load(0)
    before = len(cursor.timeline)
    record = cursor.append(parse_command("insert 1..9"))
    assert len(cursor.timeline) == before + 1
    assert cursor.chapter.scenario.steps[-1].fields == {"key": list(range(1, 10))}
    assert record.error is None and record.passed
    with pytest.raises(ScenarioError, match="unknown match name 'nosuch'"):
        cursor.append(parse_command("lock nosuch as L"))
    assert len(cursor.timeline) == before + 1
    # names the next command may use feed completion
    cursor.append(parse_command("match 1..4 as live"))
    assert "live" in complete("lock ", cursor.names(), ["full", "swa"])


def test_a_checked_or_refused_step_leaves_the_names_as_they_were():
    """Names are journaled per step (no copy): a check, and a step refused after it
    defined or ended a name (its expect clause is bad), undo exactly what they did."""
    appender = StepAppender(load_scenario(ROOT / "scenarios/tour.toml"))
    appender.append(parse_command("match 1 as a1"))
    appender.append(parse_command("lock a1 as L1"))
    before = appender.names
    appender.check(parse_command("match 2 as b1"))
    with pytest.raises(ScenarioError, match="unknown expect field|expect"):
        appender.append(parse_command("match 2 as c1 expect no_such_field=1"))
    with pytest.raises(ScenarioError):
        appender.append(parse_command("unlock L1 expect no_such_field=1"))
    assert appender.names == before
    appender.append(parse_command("match 3 as b1"))  # neither b1 nor c1 was left defined
    appender.append(parse_command("match 3 as c1"))
    appender.append(parse_command("unlock L1"))  # L1 is still held
    assert "L1" not in appender.names["locks"] and {"b1", "c1"} <= set(appender.names["matches"])


def test_scenarios_handed_out_keep_their_steps_as_more_are_appended():
    appender = StepAppender(load_scenario(ROOT / "scenarios/tour.toml"))
    base = len(appender.scenario.steps)
    appender.append(parse_command("match 1 as g1"))
    first = appender.scenario
    assert first is appender.scenario  # nothing appended since: the same scenario
    appender.append(parse_command("match 2 as g2"))
    second = appender.scenario
    assert len(first.steps) == base + 1 and len(second.steps) == base + 2
    assert second.steps[: base + 1] == tuple(first.steps) and first.steps == second.steps[:-1]
    assert [s.fields["as"] for s in second.steps[-2:]] == ["g1", "g2"] and second.steps[-1] is list(second.steps)[-1]
    with pytest.raises(IndexError):
        first.steps[base + 1]
