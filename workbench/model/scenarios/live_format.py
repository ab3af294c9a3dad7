"""Live commands written back: the command that parses back to a raw step, for the
TUI's history and echo (``live`` parses them)."""

from __future__ import annotations

from typing import Any

from cache.basics.token_lists import MAX_TOKEN_ID

from ..ops import OPS
from .live_words import (
    FIELD_NAME, INT, PLAIN_NAME, TEXT_KEYWORDS, flag_fields, name_fields, reserved_words, slot_of, token_field_of,
)
from .node_refs import is_ref, token_runs


def format_command(raw: dict[str, Any]) -> str:
    """The command that parses back to ``raw`` (for history and echo); ValueError for a
    dict no command can stand for (a malformed one: not a step a scenario would hold)."""
    op = raw.get("op")
    if op not in OPS:
        raise ValueError(f"no command for op {op!r}")
    rest = {k: v for k, v in raw.items() if k != "op"}
    words = [op]
    spec = OPS[op]
    slot, token_field = slot_of(spec), token_field_of(spec)
    if slot in rest:
        words.append(_name(rest.pop(slot)))
    if token_field:
        if token_field not in rest or (slot and slot not in raw and rest[token_field]):
            raise ValueError(f"no command for {op!r} with these {token_field}")
        words.extend(_token_words(rest.pop(token_field)))
    for word, (field, value) in flag_fields(spec).items():
        if (slot is None or slot in raw) and field in rest and _same(rest[field], value):
            del rest[field]
            words.append(word)
    expect = rest.pop("expect", None)
    for field in TEXT_KEYWORDS:
        if field in rest:
            value = rest.pop(field)
            words += [field, _name(value) if field == "as" else _text(value)]
    for field, value in rest.items():
        words.append(f"{_field(field)}={_name(value) if field in name_fields() else _literal(value)}")
    if expect is not None:
        words.append("expect")
        words.extend(_expect_words(expect))
    return " ".join(words)


def _expect_words(expect: Any) -> list[str]:
    if not isinstance(expect, dict):
        raise ValueError("expect must be a table")
    words = []
    for field, value in expect.items():
        if isinstance(value, dict) and value:
            for m, v in value.items():
                if isinstance(v, dict) and v:  # a table in a table: FIELD.MEMBER.KEY=V
                    words += [f"{_field(field)}.{_name(m)}.{_name(k)}={_literal(x)}" for k, x in v.items()]
                else:
                    words.append(f"{_field(field)}.{_name(m)}={_literal(v)}")
        else:
            words.append(f"{_field(field)}={_literal(value)}")
    return words


def _token_words(tokens: Any) -> list[str]:
    """Token ids, runs of three or more consecutive ids as FIRST..LAST."""
    if not isinstance(tokens, list) or not all(type(t) is int and 0 <= t <= MAX_TOKEN_ID for t in tokens):
        raise ValueError("tokens must be a list of token ids")
    return token_runs(tokens)


def _field(field: Any) -> str:
    if not isinstance(field, str) or not FIELD_NAME.fullmatch(field):
        raise ValueError(f"no command for field {field!r}")
    return field


def _name(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"a name must be a string (got {value!r})")
    return value if PLAIN_NAME.fullmatch(value) and value not in reserved_words() else _text(value)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"a text must be a string (got {value!r})")
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r") + '"'


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and INT.fullmatch(str(value)):
        return str(value)
    if isinstance(value, str):
        return _text(value)  # quoted, so it never reads back as an int or a boolean
    if isinstance(value, list) and all(type(v) is int and v >= 0 for v in value):
        return "[" + ",".join(map(str, value)) + "]"
    if isinstance(value, list) and value and all(isinstance(v, str) and FIELD_NAME.fullmatch(v) for v in value):
        return "[" + ",".join(value) + "]"
    if isinstance(value, list) and all(type(v) is int and v >= 0 or _bare_path(v) for v in value):
        return "[" + ",".join(str(v) if type(v) is int else _bare_path(v) for v in value) + "]"
    if value == {}:
        return "{}"
    raise ValueError(f"no command for the value {value!r}")


def _bare_path(value: Any) -> str:
    """A token path with no namespace as an order's item (``[1..3,9]``: its spaces as
    commas, which the parser turns back), or "" when it is not one."""
    if not isinstance(value, str) or not value.startswith("[") or "," in value or not is_ref(value):
        return ""
    return value.replace(" ", ",") if value.endswith("]") else ""


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b
