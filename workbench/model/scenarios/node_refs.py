"""Naming a node in an expectation: by our node id (``3``) or by its token path
(``"[1 2 3]"``), so a scenario written from another source — an oracle, an SGLang
unit test, a bug report — can pin a node without running ours first to learn its ids.

A path is every token from the root to the node's end, as the user typed them (with
EAGLE bigram keys, the raw tokens: N + 1 tokens reach a node of N pairs), between
brackets, separated by spaces or commas, ``FIRST..LAST`` for a run: ``"[1..4 9]"``.
``"[]"`` is the root. A node under a namespace says it after the brackets, as the ops
write it: ``"[1 2 3] extra_key=lora1"``, ``"[1 2] cache_salt=s"``, or both.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Optional, Union

from cache.basics.token_lists import MAX_TOKEN_ID

from .errors import shown

MAX_PATH_TOKENS = 1 << 20  # as a key's limit: a path is a key's prefix
_ID = re.compile(r"^(0|[1-9][0-9]{0,17})$")
_PATH = re.compile(r"^\[([^\[\]]*)\]((?:\s+[a-z_]+=\S+)*)\s*$")
_TOKEN = re.compile(r"^([0-9]{1,20})(?:\.\.([0-9]{1,20}))?$")
NAMESPACE_WORDS = ("extra_key", "cache_salt")
NO_NODE = "no node"  # what a node an expectation names reads when the tree does not hold it


@dataclasses.dataclass(frozen=True)
class NodePath:
    tokens: tuple[int, ...]
    extra_key: Optional[str] = None
    cache_salt: Optional[str] = None

    def text(self) -> str:
        """The path as a scenario writes it (``"[1..3 9] extra_key=ns"``: runs of three
        or more consecutive tokens as FIRST..LAST)."""
        words = ["[" + " ".join(token_runs(self.tokens)) + "]"]
        words += [f"{word}={value}" for word, value in zip(NAMESPACE_WORDS, (self.extra_key, self.cache_salt))
                  if value is not None]
        return " ".join(words)


NodeRef = Union[int, NodePath]


def token_runs(tokens) -> list[str]:
    """Token ids as words, runs of three or more consecutive ids as FIRST..LAST."""
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


def parse_ref(value: Any) -> NodeRef:
    """A node id (an int, or a key of digits) or a token path; ValueError saying what is
    wrong with anything else (the caller adds the file, line and field)."""
    if type(value) is int:
        if value < 0:
            raise ValueError(f"node id {value} is negative")
        return value
    if not isinstance(value, str):
        raise ValueError("a node is named by its id (an int) or its token path (a string like \"[1 2 3]\")")
    if _ID.match(value):
        return int(value)
    found = _PATH.match(value.strip())
    if found is None:
        raise ValueError(f"{shown(value)} is not a node id or a token path like \"[1 2 3]\" (optionally followed by"
                         " extra_key=NS, cache_salt=SALT)")
    tokens: list[int] = []
    for word in found.group(1).replace(",", " ").split():
        run = _TOKEN.match(word)
        if run is None:
            raise ValueError(f"{shown(word)} in path {shown(value)} is not a token id or a run FIRST..LAST")
        first, last = int(run.group(1)), int(run.group(2) or run.group(1))
        if last > MAX_TOKEN_ID or first > last:
            raise ValueError(f"{shown(word)} in path {shown(value)}: token ids are below 2**31, a run goes upwards")
        if len(tokens) + last - first + 1 > MAX_PATH_TOKENS:
            raise ValueError(f"path {shown(value)} is longer than the {MAX_PATH_TOKENS:,} tokens a key may hold")
        tokens.extend(range(first, last + 1))
    space: dict[str, str] = {}
    for word in found.group(2).split():
        name, _, given = word.partition("=")
        if name not in NAMESPACE_WORDS or name in space:
            raise ValueError(f"{shown(word)} in path {shown(value)}: after the brackets come extra_key=NS and cache_salt=SALT,"
                             " once each")
        space[name] = given
    return NodePath(tuple(tokens), space.get("extra_key"), space.get("cache_salt") or None)


def is_ref(value: Any) -> bool:
    try:
        parse_ref(value)
    except ValueError:
        return False
    return True


def resolve(state, ref: NodeRef) -> Optional[int]:
    """The id of the node ``ref`` names in ``state`` (a ``TimelineState``), or None when
    no node is there: an id that left the tree, a path that ends inside an edge or
    leaves the tree."""
    if isinstance(ref, int):
        return ref if ref in state else None
    from cache.basics.keys import unpack_tokens  # numpy: only once a run reads its state

    node, at, tokens = state.root_id, 0, ref.tokens
    while at < len(tokens):
        for child in state.children(node):
            record = state.record(child)
            if (record.extra_key, record.cache_salt or None) != (ref.extra_key, ref.cache_salt):
                continue
            edge = unpack_tokens(record.key)
            if record.key_head is not None and record.parent == state.root_id:
                edge = [record.key_head, *edge]  # a bigram node under the root: its first pair's head token
            if edge and tuple(tokens[at:at + len(edge)]) == tuple(edge):
                node, at = child, at + len(edge)
                break
        else:
            return None
    return node


def path_of(state, node_id: int) -> NodePath:
    """A node's path as a scenario writes it (raw tokens, its namespace)."""
    from cache.basics.keys import unpack_tokens

    record = state.record(node_id)
    chain = []
    while record is not None and record.parent is not None:
        chain.append(record)
        record = state.record(record.parent)
    tokens: list[int] = []
    for record in reversed(chain):
        if record.key_head is not None and not tokens:
            tokens.append(record.key_head)
        tokens.extend(unpack_tokens(record.key))
    last = chain[0] if chain else None
    return NodePath(tuple(tokens), last.extra_key if last else None, (last.cache_salt or None) if last else None)


def spell(state, node_id: Optional[int], as_path: bool, missing: str) -> Any:
    """A node written back as an expectation names it: its path (``as_path``) or its
    id; ``missing`` for a node the state does not hold."""
    if node_id is None or node_id not in state:
        return missing
    return path_of(state, node_id).text() if as_path else node_id


def same_node(state, want: Any, node_id: Optional[int], missing: str) -> Any:
    """``want`` itself when it names ``node_id`` (so the comparison passes), else the
    actual node spelled as ``want`` is (a path for a path, an id for an id)."""
    ref = parse_ref(want) if is_ref(want) else None
    if ref is not None and node_id is not None and resolve(state, ref) == node_id:
        return want
    return spell(state, node_id, not isinstance(ref, int), missing)
