"""Trace lines are read by msgspec where that is exact and by json otherwise: either way
a line reads as json reads it, and a key given twice is refused (msgspec alone would
keep the last one silently)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.model.scenarios.inputs import DuplicateKeyError, TooLarge, _one_object, _unique, loads_unique


def _outcome(read, raw: bytes):
    """What ``read`` makes of ``raw``: its value, or the kind of its refusal."""
    try:
        return read(raw)
    except (DuplicateKeyError, RecursionError) as exc:
        return type(exc)
    except ValueError:
        return ValueError


def _as_json_reads(raw: bytes):
    """The exact reader: json's own parser with the repeated-key hook."""
    return _outcome(lambda data: json.loads(data, object_pairs_hook=_unique), raw)


def _as_we_read(raw: bytes):
    return _outcome(loads_unique, raw)


def test_a_trace_step_line_is_read_by_msgspec():
    line = b'{"op":"match","key":[12624,24837,29172],"req":"r1"}\n'
    assert _one_object(line) == {"op": "match", "key": [12624, 24837, 29172], "req": "r1"}
    assert loads_unique(line) == json.loads(line)


@pytest.mark.parametrize("line", [
    b'{"a":1,"a":2}',
    b'{"a":1,"a":2,"b" :3}',  # a spaced key: counted all the same
    b'{"a"\t:1,"b":[1,2],"a":2}',
    b'{"k":"x\\":","k":1}',  # an escaped quote and colon inside a string
])
def test_a_key_given_twice_is_refused(line):
    with pytest.raises(DuplicateKeyError):
        loads_unique(line)


@pytest.mark.parametrize("line", [
    b'{"t":[99999999999999999999, -99999999999999999999]}',  # past 64 bits: ints, as json reads them
    b'{"x":1e400}',  # json: inf
    b'{"x":NaN,"y":-Infinity}',
    b'{"s":"\\ud800"}',  # a lone surrogate, as json lets it through
    b'\xef\xbb\xbf{"a":1}',  # a UTF-8 byte order mark
    b'{"s":"{\\":"}',  # a brace and a key's end inside a string
    b'{"e":{"a":1,"a":2}}',  # a nested object: the exact reader's
    b'{"l":' + b"[" * 5000 + b"]" * 5000 + b"}",
])
def test_what_msgspec_reads_otherwise_reads_as_json_does(line):
    assert _one_object(line) is None or _one_object(line) == json.loads(line)
    assert repr(_as_we_read(line)) == repr(_as_json_reads(line))


def test_a_number_past_the_digit_limit_is_still_said_in_words():
    with pytest.raises(TooLarge):
        loads_unique(b'{"t":[' + b"9" * 5000 + b"]}")


_KEYS = st.sampled_from(["a", "b", "op", 'q"', "c:", "{"])
_VALUES = st.one_of(st.integers(-2**70, 2**70), st.text(max_size=4), st.lists(st.integers(0, 9), max_size=3),
                    st.floats(allow_nan=False), st.booleans(), st.none())
_SPACE = st.sampled_from(["", " ", "\t", "\n "])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(_KEYS, _SPACE, _VALUES), max_size=5), st.booleans())
def test_any_flat_object_reads_as_json_reads_it(pairs, nested):
    body = ",".join(f"{json.dumps(k)}{space}:{json.dumps(v)}" for k, space, v in pairs)
    if nested:
        body = f'{body},"n":{{{body}}}' if body else '"n":{}'
    line = ("{" + body + "}").encode()
    assert repr(_as_we_read(line)) == repr(_as_json_reads(line))
