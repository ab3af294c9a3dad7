"""Invalid scenario files and wrong usage: one clear ``file:line`` message (naming the
field), exit code 2, never a traceback; and the ``expect_error`` runner semantics."""

from __future__ import annotations

import json
import re

import pytest

from urc_util import HEADER, JSONL_HEADER, assert_invalid, jsonl, run_json, toml, urc, write


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")


def config(extra: str = "", components: str = '["full"]', kv_size: str = "64") -> str:
    """A header whose [config] is line 6, components line 7, kv_size line 8, extra line 9."""
    return f'schema = 1\n\n[scenario]\nname = "t"\n\n[config]\ncomponents = {components}\nkv_size = {kv_size}\n{extra}'


INSERT_OK = "[[step]]\nop = \"insert\"\nkey = [1, 2]\n"


# ---- malformed files ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "steps, line",
    [
        ('[[step]]\nop = "insert"\nkey = = 3\n', 11),  # invalid value
        ('[[step]]\nop = "insert\n', 10),  # unterminated string
        ('[[step]]\nop = "insert"\nkey = [1]\nkey = [2]\n', 12),  # duplicate key
        ('[[step]]\nop = "insert"\nkey = [1, 2\n[[step]]\nop = "check"\n', 12),  # array never closed
    ],
    ids=["invalid-value", "unterminated-string", "duplicate-key", "unclosed-array"],
)
def test_malformed_toml_gives_the_parsers_line(capsys, steps, line):
    f = toml("bad.toml", steps)
    assert_invalid(capsys, ["run", f], f"bad.toml:{line}", says="malformed TOML")


def test_malformed_toml_in_the_config_table(capsys):
    f = write("bad.toml", config(kv_size="64 64"))
    assert_invalid(capsys, ["run", f], "bad.toml:8", says="malformed TOML")


def test_malformed_toml_at_end_of_document_still_has_a_line(capsys):
    f = toml("bad.toml", '[[step]]\nop = "insert"\nkey = [1, 2\n')
    rc, _, err = urc(capsys, "run", f)
    assert rc == 2
    assert err.startswith("urc run: bad.toml:11: "), err


def test_malformed_json_line(capsys):
    f = jsonl("bad.jsonl", {"op": "insert", "key": [1]}, raw_lines=('{"op": insert}', '{"op": "check"}'))
    assert_invalid(capsys, ["run", f], "bad.jsonl:3", says="malformed JSON")


def test_malformed_last_json_line_with_a_newline_is_an_error_not_a_truncation(capsys):
    f = jsonl("bad.jsonl", {"op": "insert", "key": [1]}, raw_lines=('{"op": "ma',))
    assert_invalid(capsys, ["run", f], "bad.jsonl:3", says="malformed JSON")


def test_malformed_middle_line_is_an_error_even_without_final_newline(capsys):
    write("bad.jsonl", json.dumps(JSONL_HEADER) + '\n{"op": \n{"op": "check"}')
    assert_invalid(capsys, ["run", "bad.jsonl"], "bad.jsonl:2", says="malformed JSON")


def test_truncated_header_is_an_error(capsys):
    write("bad.jsonl", json.dumps(JSONL_HEADER)[:30])
    assert_invalid(capsys, ["run", "bad.jsonl"], "bad.jsonl:1", says="malformed JSON")


@pytest.mark.parametrize(
    "first, field",
    [
        ({"op": "insert", "key": [1]}, None),  # header missing: a step on line 1
        ({"schema": 2, "scenario": {"name": "t"}, "config": {"components": ["full"], "kv_size": 64}}, "schema"),
        ({"scenario": {"name": "t"}, "config": {"components": ["full"], "kv_size": 64}}, "schema"),
        ({"schema": 1, "scenario": {"name": "t"}}, None),  # no config
        ({"schema": 1, "scenario": {"name": "t"}, "config": {"components": ["full"], "kv_size": 64}, "x": 1}, None),
        ({"schema": 1, "scenario": {}, "config": {"components": ["full"], "kv_size": 64}}, "name"),
        ([1, 2], None),
    ],
    ids=["no-header", "schema-2", "no-schema", "no-config", "unknown-key", "no-name", "array"],
)
def test_jsonl_header_missing_or_wrong(capsys, first, field):
    f = jsonl("bad.jsonl", first, {"op": "check"}, header=None)
    assert_invalid(capsys, ["run", f], "bad.jsonl:1", field=field)


def test_empty_jsonl(capsys):
    write("bad.jsonl", "")
    assert_invalid(capsys, ["run", "bad.jsonl"], "bad.jsonl:1", says="header")


def test_jsonl_step_line_that_is_not_an_object(capsys):
    f = jsonl("bad.jsonl", {"op": "check"}, [1, 2])
    assert_invalid(capsys, ["run", f], "bad.jsonl:3", says="JSON object")


# ---- unknown / missing / mistyped fields -------------------------------------------------


def test_unknown_op_toml(capsys):
    f = toml("bad.toml", INSERT_OK + '\n[[step]]\n# a comment\nop = "frob"\n')
    assert_invalid(capsys, ["run", f], "bad.toml:15", field="op", says="unknown op 'frob'")


def test_unknown_op_jsonl(capsys):
    f = jsonl("bad.jsonl", {"op": "check"}, {"op": "frob"})
    assert_invalid(capsys, ["run", f], "bad.jsonl:3", field="op", says="unknown op")


@pytest.mark.parametrize("fmt", ["toml", "jsonl"])
def test_op_of_unhashable_type(capsys, fmt):
    if fmt == "toml":
        f = toml("bad.toml", '[[step]]\nop = ["insert"]\nkey = [1]\n')
        where = "bad.toml:10"
    else:
        f = jsonl("bad.jsonl", {"op": {"name": "insert"}, "key": [1]})
        where = "bad.jsonl:2"
    assert_invalid(capsys, ["run", f], where, field="op")


@pytest.mark.parametrize(
    "text, where, field",
    [
        (HEADER + '[[step]]\nop = "insert"\nkey = [1]\nbogus = 3\n', "bad.toml:12", "bogus"),
        (HEADER + '[[step]]\nop = "lock"\nmatch = "m"\nas = "l"\nkey = [1]\n', "bad.toml:13", "key"),
        (config("bogus = 1\n"), "bad.toml:9", "bogus"),
        ('schema = 1\n\n[scenario]\nname = "t"\nauthor = "x"\n\n[config]\ncomponents = ["full"]\nkv_size = 64\n',
         "bad.toml:5", "author"),
    ],
    ids=["step", "field-of-another-op", "config", "scenario"],
)
def test_unknown_field(capsys, text, where, field):
    write("bad.toml", text)
    assert_invalid(capsys, ["run", "bad.toml"], where, field=field, says="unknown")


def test_unknown_top_level_key(capsys):
    write("bad.toml", HEADER.replace("schema = 1\n", "schema = 1\nsteps = 3\n"))
    assert_invalid(capsys, ["run", "bad.toml"], "bad.toml:2", says="unknown top-level key 'steps'")


def test_unknown_field_jsonl(capsys):
    f = jsonl("bad.jsonl", {"op": "check"}, {"op": "insert", "key": [1], "bogus": 1})
    assert_invalid(capsys, ["run", f], "bad.jsonl:3", field="bogus")


@pytest.mark.parametrize(
    "steps, where, field",
    [
        (INSERT_OK + '[[step]]\nop = "insert"\n', "bad.toml:12", "key"),
        (INSERT_OK + '[[step]]\nop = "match"\nkey = [1]\nas = "m"\n[[step]]\nop = "lock"\nmatch = "m"\n',
         "bad.toml:16", "as"),
        (INSERT_OK + '[[step]]\nkey = [1]\n', "bad.toml:12", "op"),
        ('[[step]]\nop = "req_prefill"\nreq = "r"\n', "bad.toml:9", "tokens"),
    ],
    ids=["insert-key", "lock-as", "op", "prefill-tokens"],
)
def test_missing_required_step_field(capsys, steps, where, field):
    f = toml("bad.toml", steps)
    assert_invalid(capsys, ["run", f], where, field=field)


@pytest.mark.parametrize("missing, field", [("kv_size = 64\n", "kv_size"), ('components = ["full"]\n', "components")])
def test_missing_required_config_field(capsys, missing, field):
    write("bad.toml", HEADER.replace(missing, ""))
    assert_invalid(capsys, ["run", "bad.toml"], "bad.toml:6", field=field)


def test_missing_scenario_name(capsys):
    write("bad.toml", HEADER.replace('name = "t"\n', 'description = "d"\n'))
    assert_invalid(capsys, ["run", "bad.toml"], "bad.toml:3", field="name")


def test_wrong_schema(capsys):
    write("bad.toml", HEADER.replace("schema = 1", 'schema = "1"'))
    assert_invalid(capsys, ["run", "bad.toml"], "bad.toml:1", field="schema")


@pytest.mark.parametrize(
    "text",
    [HEADER.replace('[scenario]\nname = "t"\n', ""), HEADER.replace('[config]\ncomponents = ["full"]\nkv_size = 64\n', ""),
     HEADER + '[step]\nop = "check"\n'],
    ids=["no-scenario-table", "no-config-table", "step-not-an-array"],
)
def test_missing_table_still_has_a_line(capsys, text):
    write("bad.toml", text)
    rc, _, err = urc(capsys, "run", "bad.toml")
    assert rc == 2 and "Traceback" not in err
    assert re.match(r"urc run: bad\.toml:\d+: ", err), err


@pytest.mark.parametrize(
    "text, where, field",
    [
        (config(kv_size='"64"'), "bad.toml:8", "kv_size"),
        (config(kv_size="true"), "bad.toml:8", "kv_size"),
        (config(kv_size="64.0"), "bad.toml:8", "kv_size"),
        (config(components='"full"'), "bad.toml:7", "components"),
        (config("page_size = [4]\n"), "bad.toml:9", "page_size"),
        (config("auto_evict = 1\n"), "bad.toml:9", "auto_evict"),
        (config("device = 0\n"), "bad.toml:9", "device"),
        (HEADER.replace('name = "t"', "name = 3"), "bad.toml:4", "name"),
        (HEADER + '[[step]]\nop = "insert"\nkey = "1 2 3"\n', "bad.toml:11", "key"),
        (HEADER + '[[step]]\nop = "insert"\nkey = 1\n', "bad.toml:11", "key"),
        (HEADER + '[[step]]\nop = "req_prefill"\nreq = "r"\ntokens = [1]\n[[step]]\nop = "req_finish"\nreq = "r"\n'
         "insert = 1\n", "bad.toml:16", "insert"),
        (HEADER + '[[step]]\nop = "req_prefill"\nreq = 7\ntokens = [1]\n', "bad.toml:11", "req"),
        (HEADER + '[[step]]\nop = "match"\nkey = [1]\nas = ""\n', "bad.toml:12", "as"),
        (HEADER + '[[step]]\nop = "evict"\nfull = "3"\n', "bad.toml:11", "full"),
        (HEADER + '[[step]]\nop = "evict"\nfull = -1\n', "bad.toml:11", "full"),
        (HEADER + '[[step]]\nop = "insert"\nkey = [1]\nexpect = { prefix_len = "0" }\n', "bad.toml:12",
         "expect.prefix_len"),
        (HEADER + '[[step]]\nop = "insert"\nkey = [1]\nexpect = { nodes = true }\n', "bad.toml:12", "expect.nodes"),
        (HEADER + '[[step]]\nop = "insert"\nkey = [1]\nexpect = 3\n', "bad.toml:12", "expect"),
        (HEADER + '[[step]]\nop = "insert"\nkey = [1]\nexpect = { full_evicted = 0 }\n', "bad.toml:12",
         "expect.full_evicted"),
        (HEADER + '[[step]]\nop = "insert"\nkey = [1]\nexpect_error = 1\n', "bad.toml:12", "expect_error"),
        (HEADER + '[[step]]\nop = "insert"\nkey = [1]\ndescription = 1979-05-27\n', "bad.toml:12", "description"),
    ],
    ids=["kv_size-str", "kv_size-bool", "kv_size-float", "components-str", "page_size-list", "auto_evict-int",
         "device-int", "name-int", "key-str", "key-int", "insert-int", "req-int", "as-empty", "evict-str",
         "evict-negative", "expect-str", "expect-bool", "expect-not-table", "expect-other-ops-result",
         "expect_error-int", "description-date"],
)
def test_wrong_type(capsys, text, where, field):
    write("bad.toml", text)
    assert_invalid(capsys, ["run", "bad.toml"], where, field=field)


def test_expect_and_expect_error_together(capsys):
    f = toml("bad.toml", '[[step]]\nop = "insert"\nkey = [1]\nexpect = { nodes = 1 }\nexpect_error = "x"\n')
    assert_invalid(capsys, ["run", f], "bad.toml:13", field="expect_error")


# ---- token ids ---------------------------------------------------------------------------


@pytest.mark.parametrize("tok", ["-1", "1.5", "2.0", "true", str(2**31), "nan", '"3"'])
@pytest.mark.parametrize("field, op", [("key", "insert"), ("key", "match"), ("tokens", "req_prefill")])
def test_token_ids_must_be_non_negative_ints(capsys, tok, field, op):
    req = 'req = "r"\n' if op == "req_prefill" else ""
    f = toml("bad.toml", f'[[step]]\nop = "{op}"\n{req}# tokens\n{field} = [1, {tok}, 2]\n')
    line = 13 if req else 12
    assert_invalid(capsys, ["run", f], f"bad.toml:{line}", field=field, says="token ids")


@pytest.mark.parametrize("tok", [-5, 0.5, True, 2**31, 2**40, None, "1"])
def test_token_ids_jsonl(capsys, tok):
    f = jsonl("bad.jsonl", {"op": "check"}, {"op": "insert", "key": [tok]})
    assert_invalid(capsys, ["run", f], "bad.jsonl:3", field="key")


def test_largest_token_id_and_zero_are_valid(capsys):
    f = toml("ok.toml", f'[[step]]\nop = "insert"\nkey = [0, {2**31 - 1}]\nexpect = {{ nodes = 1 }}\n')
    rc, out, err = urc(capsys, "run", f)
    assert (rc, err) == (0, ""), out


def test_empty_tokens_for_a_request(capsys):
    f = toml("bad.toml", '[[step]]\nop = "req_prefill"\nreq = "r"\ntokens = []\n')
    assert_invalid(capsys, ["run", f], "bad.toml:12", field="tokens")


# ---- names -------------------------------------------------------------------------------

MATCH_LOCK = INSERT_OK + '[[step]]\nop = "match"\nkey = [1, 2]\nas = "m"\n[[step]]\nop = "lock"\nmatch = "m"\nas = "l"\n'
# lines: insert 9-11, match 12-15, lock 16-19; the next step starts at line 20


@pytest.mark.parametrize(
    "steps, where, field, says",
    [
        ('[[step]]\nop = "lock"\nmatch = "nope"\nas = "l"\n', "bad.toml:11", "match", "unknown match name 'nope'"),
        (MATCH_LOCK + '[[step]]\nop = "unlock"\nlock = "other"\n', "bad.toml:22", "lock", "unknown lock name 'other'"),
        (MATCH_LOCK + '[[step]]\nop = "check"\nexpect = { full_lock_ref = { x = 1 } }\n', "bad.toml:22",
         "expect.full_lock_ref", "unknown match name 'x'"),
        ('[[step]]\nop = "req_decode"\nreq = "r"\ntokens = [1]\n', "bad.toml:11", "req", "'r'"),
        ('[[step]]\nop = "req_chunk"\nreq = "r"\n', "bad.toml:11", "req", "'r'"),
        ('[[step]]\nop = "req_prefill"\nreq = "r"\ntokens = [1]\n[[step]]\nop = "req_finish"\nreq = "r"\n'
         '[[step]]\nop = "req_finish"\nreq = "r"\n', "bad.toml:18", "req", "finished request 'r'"),
        ('[[step]]\nop = "req_prefill"\nreq = "r"\ntokens = [1]\n[[step]]\nop = "req_prefill"\nreq = "r"\n'
         "tokens = [2]\n", "bad.toml:15", "req", "already running"),
    ],
    ids=["match", "lock", "expect-match", "decode", "chunk", "finished", "prefill-twice"],
)
def test_unknown_names(capsys, steps, where, field, says):
    f = toml("bad.toml", steps)
    assert_invalid(capsys, ["run", f], where, field=field, says=says)


def test_unlocking_twice(capsys):
    f = toml("bad.toml", MATCH_LOCK + '[[step]]\nop = "unlock"\nlock = "l"\n[[step]]\nop = "unlock"\nlock = "l"\n')
    assert_invalid(capsys, ["run", f], "bad.toml:25", field="lock", says="already unlocked")


def test_relocking_a_name_makes_a_second_unlock_valid(capsys):
    relock = '[[step]]\nop = "lock"\nmatch = "m"\nas = "l"\n'
    unlock = '[[step]]\nop = "unlock"\nlock = "l"\n'
    f = toml("ok.toml", MATCH_LOCK + unlock + relock + unlock + '[[step]]\nop = "check"\nexpect = { full_protected = 0 }\n')
    assert urc(capsys, "run", f)[0] == 0


def test_unlocking_twice_jsonl(capsys):
    f = jsonl("bad.jsonl", {"op": "insert", "key": [1]}, {"op": "match", "key": [1], "as": "m"},
              {"op": "lock", "match": "m", "as": "l"}, {"op": "unlock", "lock": "l"}, {"op": "unlock", "lock": "l"})
    assert_invalid(capsys, ["run", f], "bad.jsonl:6", field="lock")


# ---- configs that cannot be built ---------------------------------------------------------


@pytest.mark.parametrize(
    "text, where, field, says",
    [
        (config("page_size = 4\n", kv_size="63"), "bad.toml:6", None, "multiple of page_size"),
        (config(components='["swa"]'), "bad.toml:7", "components", '"full"'),
        (config(components="[]"), "bad.toml:7", "components", None),
        (config(components='["full", 3]'), "bad.toml:7", "components", None),
        (config(components='["full", "foo"]'), "bad.toml:6", None, "'foo'"),
        (config(components='["foo", "full"]'), "bad.toml:6", None, "'full'"),
        (config(components='["full", "full"]'), "bad.toml:6", None, "duplicate"),
        (config('faults = ["drop"]\n'), "bad.toml:9", "faults", "unknown fault 'drop'"),
        (config('faults = ["swa-recovery-stale-mapping"]\n'), "bad.toml:9", "faults", "needs the swa component"),
        (config('faults = [3]\n'), "bad.toml:9", "faults", "fault names"),
        (config("page_size = 0\n"), "bad.toml:6", None, "page_size"),
        (config(kv_size="-64"), "bad.toml:6", None, "kv_size"),
        (config('device = "tpu"\n'), "bad.toml:6", None, "device"),
    ],
    ids=["kv-not-page-multiple", "no-full", "empty", "non-string", "unknown-foo", "full-not-first", "duplicate",
         "faults", "fault-needs-swa", "fault-not-a-name", "page-0", "kv-negative", "device"],
)
def test_config_that_cannot_be_built(capsys, text, where, field, says):
    write("bad.toml", text + INSERT_OK)
    assert_invalid(capsys, ["run", "bad.toml"], where, field=field, says=says)


def test_config_that_cannot_be_built_fails_show_and_bench_too(capsys):
    write("bad.toml", config("page_size = 4\n", kv_size="63"))
    assert_invalid(capsys, ["show", "bad.toml"], "bad.toml:6", command="show")
    assert_invalid(capsys, ["bench", "--trace", "bad.toml", "--json"], "bad.toml:6", command="bench")


def test_config_with_an_unallocatable_pool(capsys):
    write("bad.toml", config(kv_size=str(2**63 - 1)))
    assert_invalid(capsys, ["run", "bad.toml"], "bad.toml:6")


def test_faults_empty_is_fine(capsys):
    write("ok.toml", config("faults = []\n") + INSERT_OK)
    assert urc(capsys, "run", "ok.toml")[0] == 0


# ---- usage -------------------------------------------------------------------------------


def test_states_without_json_and_record_with_two_files(capsys):
    f = toml("ok.toml", INSERT_OK)
    rc, out, err = urc(capsys, "run", "--states", f)
    assert (rc, out, err.strip()) == (2, "", "urc run: --states only applies with --json")
    rc, out, err = urc(capsys, "run", "--record", "out.jsonl", f, f)
    assert (rc, out, err.strip()) == (2, "", "urc run: --record takes exactly one scenario file")


@pytest.mark.parametrize("step, bound", [("2", 1), ("-1", 1), ("99", 1)])
def test_show_step_out_of_range(capsys, step, bound):
    f = toml("ok.toml", INSERT_OK)
    assert_invalid(capsys, ["show", f, "--step", step], "ok.toml", says=f"between 0 and {bound}", command="show")


@pytest.mark.parametrize("argv", [["run", "x.toml"], ["show", "x.toml"], ["bench", "--trace", "x.toml"]])
def test_missing_file(capsys, argv):
    assert_invalid(capsys, argv, "x.toml", says="no such file", command=argv[0])


@pytest.mark.parametrize("name", ["s.json", "s.txt", "s.yaml", "s"])
def test_wrong_suffix(capsys, name):
    write(name, HEADER)
    assert_invalid(capsys, ["run", name], name, says=".toml")
    assert_invalid(capsys, ["show", name], name, says=".toml", command="show")


@pytest.mark.parametrize("argv", [["run"], ["frob"], [], ["run", "--bogus", "x.toml"], ["show", "x.toml", "--step", "a"]])
def test_argparse_usage_errors_exit_2(capsys, argv):
    rc, out, err = urc(capsys, *argv)
    assert rc == 2 and "error:" in err and "Traceback" not in err


@pytest.mark.parametrize("argv", [["--requests", "0"], ["--tree-sizes", "1,x"]])
def test_bench_bad_numbers(capsys, argv):
    rc, _, err = urc(capsys, "bench", *argv)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and err.startswith("urc bench: ")


def test_one_invalid_file_stops_the_run_before_any_file_runs(capsys):
    good = toml("good.toml", INSERT_OK)
    bad = toml("bad.toml", '[[step]]\nop = "frob"\n')
    assert_invalid(capsys, ["run", "--json", good, bad], "bad.toml:10", field="op")
    assert_invalid(capsys, ["run", bad, good], "bad.toml:10", field="op")


def test_directory_or_unreadable_file(capsys, tmp_path):
    (tmp_path / "d.toml").mkdir()
    (tmp_path / "latin.toml").write_bytes(b"schema = 1\nname = \"\xff\"\n")
    assert_invalid(capsys, ["run", "d.toml"], "d.toml")
    assert_invalid(capsys, ["run", "latin.toml"], "latin.toml")


# ---- expect_error semantics -----------------------------------------------------------------

UNLOCK = '[[step]]\nop = "unlock"\nlock = "l"\n'


def test_expect_error_may_reference_a_stale_lock_and_passes_when_the_cache_refuses(capsys):
    f = toml("s.toml", MATCH_LOCK + UNLOCK + UNLOCK + 'expect_error = "not held"\n')
    rc, report = run_json(capsys, f)
    assert rc == 0 and report[0]["passed"] is True
    last = report[0]["steps"][-1]
    assert last["line"] == 23 and last["failures"] == [] and last["result"] is None
    assert "not held" in last["error"]


def test_expect_error_with_the_wrong_substring_fails(capsys):
    f = toml("s.toml", MATCH_LOCK + UNLOCK + UNLOCK + 'expect_error = "pool exhausted"\n')
    rc, report = run_json(capsys, f)
    assert rc == 1 and report[0]["passed"] is False
    (failure,) = report[0]["steps"][-1]["failures"]
    assert failure["field"] == "expect_error" and failure["expected"] == "pool exhausted"
    assert "not held" in failure["actual"]
    rc, out, _ = urc(capsys, "run", f)
    assert rc == 1 and "s.toml:23" in out and "pool exhausted" in out


def test_expect_error_when_the_op_succeeds_fails(capsys):
    f = toml("s.toml", MATCH_LOCK + UNLOCK + 'expect_error = "not held"\n')
    rc, report = run_json(capsys, f)
    assert rc == 1
    step = report[0]["steps"][-1]
    assert step["failures"] == [{"field": "expect_error", "expected": "not held", "actual": "the op succeeded"}]
    assert "error" not in step


def test_expect_error_for_unknown_names_at_run_time(capsys):
    f = toml("s.toml", '[[step]]\nop = "lock"\nmatch = "zz"\nas = "l"\nexpect_error = "unknown match"\n'
                       '[[step]]\nop = "unlock"\nlock = "l"\nexpect_error = "unknown lock"\n')
    rc, report = run_json(capsys, f)
    assert rc == 0 and [s["failures"] for s in report[0]["steps"]] == [[], []]


def test_expect_error_requires_the_state_unchanged(capsys, monkeypatch):
    """A failing op that still changed the cache fails the step (field "state")."""
    import dataclasses

    from cache import CacheError
    from workbench.model.ops import keys, spec

    def insert_then_raise(session, f):
        keys.run_insert(session, f)
        raise CacheError("boom after insert")

    monkeypatch.setitem(spec._REGISTRY, keys.INSERT.name, dataclasses.replace(keys.INSERT, run=insert_then_raise))
    f = toml("s.toml", '[[step]]\nop = "insert"\nkey = [1, 2]\nexpect_error = "boom"\n')
    rc, report = run_json(capsys, f)
    assert rc == 1
    assert [x["field"] for x in report[0]["steps"][0]["failures"]] == ["state"]


def test_an_unexpected_op_error_fails_the_step(capsys):
    f = toml("s.toml", '[[step]]\nop = "insert"\nkey = [' + ", ".join(["1"] * 100) + "]\n")
    rc, report = run_json(capsys, f)
    assert rc == 1
    (failure,) = report[0]["steps"][0]["failures"]
    assert failure["field"] == "error" and "Error" in failure["actual"]
