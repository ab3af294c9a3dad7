"""Live ops: the command language of the TUI's ``:`` bar.

A command is one line that turns into the raw step dict a ``[[step]]`` table or a JSONL
line would hold; ``StepAppender`` then checks it exactly like a step in a file, so this
module only does syntax (and never raises anything but ``ScenarioError`` on user text).

    insert 1..8 9 extra_key=ns            match 1 2 as m1        lock m1 as L1
    evict full=8 mamba=1                  req_decode r1 5 6 slide
    release r1 noinsert                   check expect nodes=3 full_lock_ref.m1=1
    unlock L1 expect_error "not held"     match 1 2 description "why this step"
    check expect full_value_len.[1,2,3]=3 full_evict_order=[[4,5],[1..3,9]] full_lock_ref={} exact=[full_lock_ref]

Words are split on whitespace; ``"…"`` (with ``\\"``, ``\\\\``, ``\\n``, ``\\t``, ``\\r``
escapes) and ``'…'`` quote a word, and a quoted word is always a literal string (never a
keyword, option, token or range). ``FIELD=VALUE`` options may come anywhere after the op;
every ``FIELD=N`` word after ``expect`` is an expectation. Splitting the words is
``live_words``'s; writing a step back as a command is ``live_format``'s.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NoReturn

from cache.basics.token_lists import MAX_TOKEN_ID
from cache.observe.metrics import metric_fields

from .. import ops
from ..ops import OPS
from .errors import ScenarioError, elide, shown
from .fields import STATE_FIELDS
from .live_words import (
    FIELD_NAME, ID_LIST, INT, NAME_LIST, RANGE, REF_LIST, TEXT_KEYWORDS, TOKEN, Word, flag_fields, name_fields, slot_of,
    split_words, token_field_of,
)
from .node_fields import order_fields
from .step import EXACT, MAX_KEY_TOKENS


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


# ---- parsing ------------------------------------------------------------------------------------


def parse_command(text: str) -> dict[str, Any]:
    """The raw step a command stands for (checked further by ``StepAppender``)."""
    words = split_words(text)
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
        self.token_field = token_field_of(self.spec)
        if self.token_field:
            self.raw[self.token_field] = []
        self.slot = slot_of(self.spec)
        self.in_expect = False

    def parse(self, words: list[Word]) -> dict[str, Any]:
        i = 0
        while i < len(words):
            word = words[i]
            i += 1
            keyword = None if word.quoted else word.text
            if keyword in TEXT_KEYWORDS:
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

    def positional(self, word: Word) -> None:
        if self.slot and self.slot not in self.raw:
            self.set(self.slot, word.text)
            return
        flag = None if word.quoted else flag_fields(self.spec).get(word.text)
        if flag is not None:
            self.set(*flag)
        elif self.token_field:
            self.tokens(word)
        else:
            raise ScenarioError(f"unexpected {shown(word.text)}; usage: {self.usage()}")

    def tokens(self, word: Word) -> None:
        tokens: list[int] = self.raw[self.token_field]
        text = word.text
        if word.quoted:
            _bad_token(json.dumps(text))
        if (span := RANGE.fullmatch(text)) is not None:
            if int(span.group(2)) > MAX_TOKEN_ID:
                _bad_token(span.group(2))
            first, last = int(span.group(1)), int(span.group(2))
            if first > last:
                raise ScenarioError(f"range {shown(text)} runs backwards; write FIRST..LAST with FIRST <= LAST")
            _check_count(len(tokens) + last - first + 1)
            tokens.extend(range(first, last + 1))
        elif TOKEN.fullmatch(text) is not None:
            if int(text) > MAX_TOKEN_ID:
                _bad_token(text)
            _check_count(len(tokens) + 1)
            tokens.append(int(text))
        elif ".." in text:
            raise ScenarioError(f"a range is FIRST..LAST, two token ids (got {shown(text)})")
        else:
            _bad_token(text if INT.fullmatch(text) else json.dumps(text))

    def option(self, word: Word, name_part: Word, value_part: Word) -> None:
        dotted = name_part.split(".") if self.in_expect else None
        field_word, member = (dotted[0], dotted[1].text) if dotted else (name_part, None)
        inner = dotted[1].split(".") if dotted else None  # FIELD.MEMBER.KEY=V: a table in a table
        if inner is not None:
            member = (inner[0].text, inner[1].text)
        field = field_word.text
        if field_word.quoted or not FIELD_NAME.fullmatch(field):
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
        if member.startswith("[") and "=" not in member:  # a token path typed [1,2,3]: as a file writes it
            member = member.replace(",", " ")
        if key is not None:
            table = table.setdefault(member, {}) if isinstance(table, dict) else None
            member = key
        if not isinstance(table, dict) or member in table:
            raise ScenarioError(f"expect {field}.{member} is given twice")
        table[member] = value


def _value(field: str, word: Word) -> Any:
    """A name field's value is a string; others are ints and true/false where they read
    so (anything else stays a string for ``StepAppender`` to refuse by field)."""
    text = word.text
    if word.quoted or field in name_fields():
        return text
    if INT.fullmatch(text):
        return int(text)
    if ID_LIST.fullmatch(text):  # an LRU order: [3,1,2] (no spaces), most recent first
        return [int(v) for v in text[1:-1].split(",") if v]
    if REF_LIST.fullmatch(text):  # an order of nodes by path or id: [[1,2,3],4]
        return [int(v) if v.isdigit() else v.replace(",", " ") for v in _ref_items(text[1:-1])]
    if NAME_LIST.fullmatch(text):  # session ids: [s1,t]
        return text[1:-1].split(",")
    if text == "{}":  # an empty table: a session with no frontier
        return {}
    return {"true": True, "false": False}.get(text, text)


def _ref_items(text: str) -> list[str]:
    """``[1,2],3`` -> ``["[1,2]", "3"]``: the list's items, split at its own commas."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    return items + [text[start:]]


def _bad_token(shown: str) -> NoReturn:
    raise ScenarioError(f"token ids must be non-negative ints below 2**31 (got {elide(shown)})")


def _check_count(count: int) -> None:
    if count > MAX_KEY_TOKENS:
        raise ScenarioError(f"{count:,} tokens is more than the {MAX_KEY_TOKENS:,} a key may hold")


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
    if spec is None or (args and args[-1] in TEXT_KEYWORDS):
        return []  # a new name or a free text comes next
    if "expect" in args:
        given = {a.split("=")[0] for a in args[args.index("expect") + 1:]}
        return [f + "=" for f in _expect_fields(spec, components) if f not in given]
    positional, has_as, skip = [], False, False
    for arg in args:
        if skip:
            skip = False
        elif arg in TEXT_KEYWORDS:
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
    """Fields this op may expect with these components (tables, written FIELD.KEY=V, left out)."""
    fields = list(spec.results_for(components, ops.host_parts(components))) + list(STATE_FIELDS)
    fields += [*order_fields(components), *metric_fields(components), EXACT]

    def present(field: str) -> bool:
        owner = ops.owner(field)
        return owner is None or owner in components

    return [f for f in fields if present(f)]
