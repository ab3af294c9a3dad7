"""Plain-text formatting shared by every view: no Python reprs reach a user.

Long keys are elided with their length so that a 4,096-token key is one short item,
booleans read as TOML writes them, and counts agree with their nouns. A file's strings
(request ids, namespaces, expected texts) come out ``printable``: escaped, never raw.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

from ..ops.spec import DETAIL_RESULTS
from ..scenarios.errors import printable

KEY_HEAD = 3  # tokens shown before the ellipsis
KEY_TAIL = 2  # and after it
KEY_SHOW_ALL = 8  # keys up to this long are shown whole


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    return f"{n:,} {noun if n == 1 else (nouns or noun + 's')}"


def tokens_text(tokens: Iterable[int], show_all: int = KEY_SHOW_ALL, counted: bool = True) -> str:
    """``[1 2 3]``, or ``[1 2 3 … 9 10] (4,096 tokens)`` for a long key; ``counted=False``
    leaves the count out, for a view that shows it beside the key anyway (``3t``). A
    sequence is only sliced: a stored key (``PackedTokens``) unpacks the tokens shown."""
    tokens = tokens if isinstance(tokens, Sequence) else list(tokens)
    n = len(tokens)
    if n <= show_all:
        return "[" + " ".join(map(str, tokens[:n])) + "]"
    head = " ".join(map(str, tokens[:KEY_HEAD]))
    tail = " ".join(map(str, tokens[n - KEY_TAIL:]))
    return f"[{head} … {tail}]" + (f" ({plural(n, 'token')})" if counted else "")


def key_text(tokens: Iterable[int], key_head: Optional[int] = None, counted: bool = True) -> str:
    """A node's key as a user typed it: ``tokens_text``, and for an EAGLE bigram key
    the token its first pair begins with (its parent's last) before a ``|``: ``[3|4 5 6]``."""
    text = tokens_text(tokens, counted=counted)
    return text if key_head is None else f"[{key_head}|{text[1:]}"


def counted_key_text(tokens: Iterable[int], key_head: Optional[int] = None) -> str:
    """A key and its length, said once whatever the key's length: ``[5]  (1 token)``,
    ``[1 2 3 … 10 11]  (11 tokens)``; an EAGLE key counts pairs: ``[3|4 5]  (2 token pairs)``."""
    tokens = tokens if isinstance(tokens, Sequence) else list(tokens)
    noun = "token" if key_head is None else "token pair"
    return f"{key_text(tokens, key_head, counted=False)}  ({plural(len(tokens), noun)})"


def value_text(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)) and all(type(v) is int for v in value):
        return tokens_text(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{printable(k)} = {value_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(value_text(v) for v in value) + "]"
    return printable(value)


def fields_text(fields: Mapping[str, Any]) -> str:
    """``key=[1 2 3], as=m`` — an op's fields as a call's arguments."""
    return ", ".join(f"{printable(k)}={value_text(v)}" for k, v in fields.items())


def result_text(result: Mapping[str, Any]) -> str:
    """An op's result; fields the config does not report (None) are left out, and so
    are those that repeat what the tree shows (``DETAIL_RESULTS``: a step may expect them)."""
    return ", ".join(f"{printable(k)}={value_text(v)}" for k, v in result.items()
                     if v is not None and k not in DETAIL_RESULTS)


def kv_event_text(event) -> str:
    """``BlockStored GPU 2 blocks 12ab…, 9f31… after 7c02… (tokens 1 2 3 4 …)``: a KV event
    as a router receives it, block ids as hex prefixes."""
    name = type(event).__name__
    hashes = getattr(event, "block_hashes", None)
    if hashes is None:
        return name
    ids = ", ".join(f"{h & (2**64 - 1):016x}"[:6] + "…" for h in hashes[:3]) + (", …" if len(hashes) > 3 else "")
    text = f"{name} {event.medium} {plural(len(hashes), 'block')} {ids}"
    parent = getattr(event, "parent_block_hash", None)
    if parent is not None:
        text += f" after {parent & (2**64 - 1):016x}"[:13] + "…"
    return text


def event_text(event, step: Optional[int] = None) -> str:
    """``[step 6 inc_lock_ref] lock full node #4, 2 tokens (request; lock_ref=1)``: the
    step it happened in and the cache op's name (and the request it served: ``[step 9
    new_request r3]``), what changed, where, how much, and why. Without ``step`` (a run
    with no scenario steps, as ``urc demo``'s) the cache's own op count: ``[op 6 …]``."""
    what = event.kind.value + (f" {event.component}" if event.component else "")
    where = f" node #{event.node}" if event.node is not None else ""
    amount = f", {plural(event.tokens, 'token')}" if event.tokens else ""
    why = event.cause.value + (f"; {event.detail}" if event.detail else "")
    op = f"{event.op} {event.request}" if event.request else event.op
    when = f"step {step}" if step is not None else f"op {event.seq}"
    return printable(f"[{when} {op}] {what}{where}{amount} ({why})")
