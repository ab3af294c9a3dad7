"""Live ops: the command language of the TUI's ``:`` bar.

A command is one line that turns into the raw step dict a ``[[step]]`` table or a JSONL
line would hold; ``StepAppender`` then checks it exactly like a step in a file, so this
module only does syntax (and never raises anything but ``ScenarioError`` on user text).

    insert 1..8 9 extra_key=ns            match 1 2 as m1        lock m1 as L1
    evict full=8 mamba=1                  req_decode r1 5 6 slide
    req_finish r1 noinsert                check expect nodes=3 full_lock_ref.m1=1
    unlock L1 expect_error "not held"     match 1 2 description "why this step"

Words are split on whitespace; ``"…"`` (with ``\\"``, ``\\\\``, ``\\n``, ``\\t``, ``\\r``
escapes) and ``'…'`` quote a word, and a quoted word is always a literal string (never a
keyword, option, token or range). ``FIELD=VALUE`` options may come anywhere after the op;
every ``FIELD=N`` word after ``expect`` is an expectation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, NoReturn, Optional

from cache.observe.metrics import metric_fields

from .. import ops
from .errors import elide, shown
from .scenario import MAX_KEY_TOKENS, MAX_TOKEN, OPS, ORDER_FIELDS, STATE_FIELDS, ScenarioError


class _Usages(Mapping):
    """op -> its live syntax, from the op's declaration."""

    def __getitem__(self, op: str) -> str:
        return OPS[op].usage()

    def __iter__(self):
        return iter(OPS)

    def __len__(self) -> int:
        return len(OPS)


OP_HELP = _Usages()
# Clauses any op may end with; TOKENS are ids and inclusive ranges FIRST..LAST.
CLAUSE_HELP = "[expect FIELD=N … FIELD.MATCH=N … swa_lru=[3,1,2]] [expect_error TEXT] [description TEXT]"

_TEXT_KEYWORDS = ("as", "expect_error", "description")  # each takes the next word as its value


def _name_fields() -> frozenset[str]:
    """Fields whose values are strings: every op's names, and the texts."""
    return ops.name_fields() | frozenset(_TEXT_KEYWORDS)


def _reserved() -> frozenset[str]:
    """Words a bare name may not be (they read as keywords)."""
    return frozenset(_TEXT_KEYWORDS + ("expect",)) | ops.flag_words()


def _flags(spec) -> dict[str, tuple[str, bool]]:
    """A bare word -> the flag field it sets, and to what."""
    return {f.flag_word: (f.name, f.flag_value) for f in spec.fields if f.flag_word}


def _slot(spec) -> Optional[str]:
    return spec.slot.name if spec.slot is not None else None


def _token_field(spec) -> Optional[str]:
    return spec.token_field.name if spec.token_field is not None else None


_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:/@+-]*")  # written without quotes by format_command
_INT = re.compile(r"-?[0-9]{1,4000}")  # int() refuses longer digit strings
_ID_LIST = re.compile(r"\[(?:[0-9]{1,18}(?:,[0-9]{1,18})*)?\]")  # [3,1,2]: node ids
_NAME_LIST = re.compile(r"\[[A-Za-z_][A-Za-z0-9_]*(?:,[A-Za-z_][A-Za-z0-9_]*)*\]")  # [s1,t]: session ids
_TOKEN = re.compile(r"[0-9]{1,20}")
_RANGE = re.compile(r"([0-9]{1,20})\.\.([0-9]{1,20})")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r"}


# ---- words --------------------------------------------------------------------------------------


class _Word:
    """One whitespace-separated word as (text, quoted) pieces, so ``a="b c"`` splits at the
    ``=`` while a quoted ``=`` or ``.`` stays part of a name."""

    def __init__(self, pieces: list[tuple[str, bool]]) -> None:
        self.pieces = pieces

    @property
    def text(self) -> str:
        return "".join(text for text, _ in self.pieces)

    @property
    def quoted(self) -> bool:
        return any(quoted for _, quoted in self.pieces)

    def split(self, char: str) -> Optional[tuple["_Word", "_Word"]]:
        """The parts either side of the first unquoted ``char`` (None when there is none)."""
        for i, (text, quoted) in enumerate(self.pieces):
            at = -1 if quoted else text.find(char)
            if at >= 0:
                left = self.pieces[:i] + [(text[:at], False)]
                right = [(text[at + 1:], False)] + self.pieces[i + 1:]
                return _Word(left), _Word(right)
        return None


def _words(text: str) -> list[_Word]:
    if '"' not in text and "'" not in text:  # the usual case, fast even for a pasted 1M-token key
        return [_Word([(word, False)]) for word in text.split()]
    words: list[_Word] = []
    pieces: Optional[list[tuple[str, bool]]] = None
    i, n = 0, len(text)
    while i < n:
        if text[i].isspace():
            if pieces is not None:
                words.append(_Word(pieces))
                pieces = None
            i += 1
            continue
        pieces = [] if pieces is None else pieces
        if text[i] in "\"'":
            i, literal = _quoted(text, i)
            pieces.append((literal, True))
            continue
        j = i
        while j < n and not text[j].isspace() and text[j] not in "\"'":
            j += 1
        pieces.append((text[i:j], False))
        i = j
    if pieces is not None:
        words.append(_Word(pieces))
    return words


def _quoted(text: str, start: int) -> tuple[int, str]:
    """The literal of the quote opening at ``start`` and the index after its end."""
    quote, out, i = text[start], [], start + 1
    while i < len(text):
        ch = text[i]
        if ch == quote:
            return i + 1, "".join(out)
        if ch == "\\" and quote == '"' and i + 1 < len(text):
            i += 1
            out.append(_ESCAPES.get(text[i], text[i]))
        else:
            out.append(ch)
        i += 1
    raise ScenarioError(f"unclosed {quote} quote (column {start + 1})")


# ---- parsing ------------------------------------------------------------------------------------


def parse_command(text: str) -> dict[str, Any]:
    """The raw step a command stands for (checked further by ``StepAppender``)."""
    words = _words(text)
    if not words:
        raise ScenarioError(f"empty command; start with an op: {', '.join(OPS)}")
    op = words[0].text
    if op not in OPS:
        raise ScenarioError(f"unknown op {shown(op)}; known: {', '.join(OPS)}")
    return _Parser(op).parse(words[1:])


class _Parser:
    def __init__(self, op: str) -> None:
        self.op = op
        self.spec = OPS[op]
        self.raw: dict[str, Any] = {"op": op}
        self.token_field = _token_field(self.spec)
        if self.token_field:
            self.raw[self.token_field] = []
        self.slot = _slot(self.spec)
        self.in_expect = False

    def parse(self, words: list[_Word]) -> dict[str, Any]:
        i = 0
        while i < len(words):
            word = words[i]
            i += 1
            keyword = None if word.quoted else word.text
            if keyword in _TEXT_KEYWORDS:
                if i >= len(words):
                    what = "a name" if keyword == "as" else "a text (quote it when it has spaces)"
                    raise ScenarioError(f"missing {what} after {keyword!r}; usage: {self.usage()}")
                self.set(keyword, words[i].text)
                i += 1
            elif keyword == "expect":
                self.set("expect", {})
                self.in_expect = True
            elif (option := word.split("=")) is not None:
                self.option(word, *option)
            elif self.in_expect:
                raise ScenarioError(f"after 'expect' write FIELD=N (got {shown(word.text)})")
            else:
                self.positional(word)
        return self.raw

    def usage(self) -> str:
        return OP_HELP[self.op]

    def set(self, field: str, value: Any) -> None:
        if field in self.raw:
            raise ScenarioError(f"{field!r} is given twice; usage: {self.usage()}")
        self.raw[field] = value

    def positional(self, word: _Word) -> None:
        if self.slot and self.slot not in self.raw:
            self.set(self.slot, word.text)
            return
        flag = None if word.quoted else _flags(self.spec).get(word.text)
        if flag is not None:
            self.set(*flag)
        elif self.token_field:
            self.tokens(word)
        else:
            raise ScenarioError(f"unexpected {shown(word.text)}; usage: {self.usage()}")

    def tokens(self, word: _Word) -> None:
        tokens: list[int] = self.raw[self.token_field]
        text = word.text
        if word.quoted:
            _bad_token(json.dumps(text))
        if (span := _RANGE.fullmatch(text)) is not None:
            if int(span.group(2)) > MAX_TOKEN:
                _bad_token(span.group(2))
            first, last = int(span.group(1)), int(span.group(2))
            if first > last:
                raise ScenarioError(f"range {shown(text)} runs backwards; write FIRST..LAST with FIRST <= LAST")
            _check_count(len(tokens) + last - first + 1)
            tokens.extend(range(first, last + 1))
        elif _TOKEN.fullmatch(text) is not None:
            if int(text) > MAX_TOKEN:
                _bad_token(text)
            _check_count(len(tokens) + 1)
            tokens.append(int(text))
        elif ".." in text:
            raise ScenarioError(f"a range is FIRST..LAST, two token ids (got {shown(text)})")
        else:
            _bad_token(text if _INT.fullmatch(text) else json.dumps(text))

    def option(self, word: _Word, name_part: _Word, value_part: _Word) -> None:
        dotted = name_part.split(".") if self.in_expect else None
        field_word, member = (dotted[0], dotted[1].text) if dotted else (name_part, None)
        inner = dotted[1].split(".") if dotted else None  # FIELD.MEMBER.KEY=V: a table in a table
        if inner is not None:
            member = (inner[0].text, inner[1].text)
        field = field_word.text
        if field_word.quoted or not _FIELD_NAME.fullmatch(field):
            if name_part.split(".") is not None and not self.in_expect:
                raise ScenarioError(f"FIELD.MATCH=N goes in the expect clause (got {shown(word.text)})")
            raise ScenarioError(f"an option is FIELD=VALUE (got {shown(word.text)}); usage: {self.usage()}")
        value = _value(field if not self.in_expect else "", value_part)
        if self.in_expect:
            self.expect(field, member, value)
        elif field == self.token_field:
            raise ScenarioError(f"write the tokens as words after the op, not {field}=; usage: {self.usage()}")
        elif field in ("op", "expect"):
            what = "the op is the first word" if field == "op" else "write expect FIELD=N …"
            raise ScenarioError(f"{what} (got {shown(word.text)})")
        else:
            self.set(field, value)

    def expect(self, field: str, member, value: Any) -> None:
        """``FIELD=V``, ``FIELD.MEMBER=V`` or, for a table of tables (a session's slot),
        ``FIELD.MEMBER.KEY=V`` (``member`` is then the pair)."""
        expect: dict[str, Any] = self.raw["expect"]
        if member is None:
            if field in expect:
                raise ScenarioError(f"expect {field!r} is given twice")
            expect[field] = value
            return
        table = expect.setdefault(field, {})
        member, key = member if isinstance(member, tuple) else (member, None)
        if key is not None:
            table = table.setdefault(member, {}) if isinstance(table, dict) else None
            member = key
        if not isinstance(table, dict) or member in table:
            raise ScenarioError(f"expect {field}.{member} is given twice")
        table[member] = value


def _value(field: str, word: _Word) -> Any:
    """A name field's value is a string; others are ints and true/false where they read
    so (anything else stays a string for ``StepAppender`` to refuse by field)."""
    text = word.text
    if word.quoted or field in _name_fields():
        return text
    if _INT.fullmatch(text):
        return int(text)
    if _ID_LIST.fullmatch(text):  # an LRU order: [3,1,2] (no spaces), most recent first
        return [int(v) for v in text[1:-1].split(",") if v]
    if _NAME_LIST.fullmatch(text):  # session ids: [s1,t]
        return text[1:-1].split(",")
    if text == "{}":  # an empty table: a session with no frontier
        return {}
    return {"true": True, "false": False}.get(text, text)


def _bad_token(shown: str) -> NoReturn:
    raise ScenarioError(f"token ids must be non-negative ints below 2**31 (got {elide(shown)})")


def _check_count(count: int) -> None:
    if count > MAX_KEY_TOKENS:
        raise ScenarioError(f"{count:,} tokens is more than the {MAX_KEY_TOKENS:,} a key may hold")


# ---- formatting ---------------------------------------------------------------------------------


def format_command(raw: dict[str, Any]) -> str:
    """The command that parses back to ``raw`` (for history and echo); ValueError for a
    dict no command can stand for (a malformed one: not a step a scenario would hold)."""
    op = raw.get("op")
    if op not in OPS:
        raise ValueError(f"no command for op {op!r}")
    rest = {k: v for k, v in raw.items() if k != "op"}
    words = [op]
    spec = OPS[op]
    slot, token_field = _slot(spec), _token_field(spec)
    if slot in rest:
        words.append(_name(rest.pop(slot)))
    if token_field:
        if token_field not in rest or (slot and slot not in raw and rest[token_field]):
            raise ValueError(f"no command for {op!r} with these {token_field}")
        words.extend(_token_words(rest.pop(token_field)))
    for word, (field, value) in _flags(spec).items():
        if (slot is None or slot in raw) and field in rest and _same(rest[field], value):
            del rest[field]
            words.append(word)
    expect = rest.pop("expect", None)
    for field in _TEXT_KEYWORDS:
        if field in rest:
            value = rest.pop(field)
            words += [field, _name(value) if field == "as" else _text(value)]
    for field, value in rest.items():
        words.append(f"{_field(field)}={_name(value) if field in _name_fields() else _literal(value)}")
    if expect is not None:
        words.append("expect")
        words.extend(_expect_words(expect))
    return " ".join(words)


def _expect_words(expect: Any) -> list[str]:
    if not isinstance(expect, dict):
        raise ValueError("expect must be a table")
    words = []
    for field, value in expect.items():
        if isinstance(value, dict):
            if not value:
                raise ValueError(f"no command for an empty expect {field!r} table")
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
    if not isinstance(tokens, list) or not all(type(t) is int and 0 <= t <= MAX_TOKEN for t in tokens):
        raise ValueError("tokens must be a list of token ids")
    words, i = [], 0
    while i < len(tokens):
        j = i
        while j + 1 < len(tokens) and tokens[j + 1] == tokens[j] + 1:
            j += 1
        if j - i >= 2:
            words.append(f"{tokens[i]}..{tokens[j]}")
            i = j + 1
        else:
            words.append(str(tokens[i]))
            i += 1
    return words


def _field(field: Any) -> str:
    if not isinstance(field, str) or not _FIELD_NAME.fullmatch(field):
        raise ValueError(f"no command for field {field!r}")
    return field


def _name(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"a name must be a string (got {value!r})")
    return value if _PLAIN_NAME.fullmatch(value) and value not in _reserved() else _text(value)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"a text must be a string (got {value!r})")
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r") + '"'


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and _INT.fullmatch(str(value)):
        return str(value)
    if isinstance(value, str):
        return _text(value)  # quoted, so it never reads back as an int or a boolean
    if isinstance(value, list) and all(type(v) is int and v >= 0 for v in value):
        return "[" + ",".join(map(str, value)) + "]"
    if isinstance(value, list) and value and all(isinstance(v, str) and _FIELD_NAME.fullmatch(v) for v in value):
        return "[" + ",".join(value) + "]"
    if value == {}:
        return "{}"
    raise ValueError(f"no command for the value {value!r}")


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


# ---- completion ---------------------------------------------------------------------------------


def op_allowed(op: str, components: list[str]) -> bool:
    """Whether ``op`` can run at all with these components (release_window needs swa)."""
    spec = ops.get(op)
    return spec is not None and all(need in (ops.HOST, ops.STORAGE) or need in components for need in spec.needs)


def complete(text: str, names: dict[str, list[str]], components: list[str]) -> list[str]:
    """Sorted replacements for the word being typed at the end of ``text``; ``names`` are
    the live names per namespace (``StepAppender.names``)."""
    words = text.split()
    current = words.pop() if words and not text[-1].isspace() else ""
    if not words:
        candidates = [op for op in OPS if op_allowed(op, components)]
    else:
        candidates = _candidates(words[0], words[1:], names, components)
    return sorted({c for c in candidates if c.startswith(current)})


def _candidates(op: str, args: list[str], names: dict[str, list[str]], components: list[str]) -> list[str]:
    spec = ops.get(op)
    if spec is None or (args and args[-1] in _TEXT_KEYWORDS):
        return []  # a new name or a free text comes next
    if "expect" in args:
        given = {a.split("=")[0] for a in args[args.index("expect") + 1:]}
        return [f + "=" for f in _expect_fields(spec, components) if f not in given]
    positional, has_as, skip = [], False, False
    for arg in args:
        if skip:
            skip = False
        elif arg in _TEXT_KEYWORDS:
            has_as, skip = has_as or arg == "as", True
        elif "=" not in arg:
            positional.append(arg)
    slot = spec.slot
    if slot is not None and not positional:
        return list(names.get(slot.uses, [])) if slot.uses else []  # a new name (a prefill's request) comes next
    offered = [f.name for f in spec.fields if f.offered and f.name not in args]
    if offered and positional and not has_as:
        return offered
    if spec.per_component:
        given = {a.split("=")[0] for a in args}
        return [c + "=" for c in spec.component_fields(components, ops.host_parts(components)) if c not in given]
    least = (slot is not None) + (spec.token_field is not None and spec.token_field.required)
    flags = [f.flag_word for f in spec.fields
             if f.flag_word and (f.needs is None or f.needs in components) and f.flag_word not in positional[1:]]
    return flags if len(positional) >= least else []


def _expect_fields(spec, components: list[str]) -> list[str]:
    """Fields this op may expect with these components (per-match tables left out)."""
    fields = list(spec.results_for(components, ops.host_parts(components))) + list(STATE_FIELDS) + list(ORDER_FIELDS)
    fields += metric_fields(components)

    def present(field: str) -> bool:
        owner = ops.owner(field)
        return owner is None or owner in components

    return [f for f in fields if present(f)]
