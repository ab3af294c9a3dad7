"""Match verdicts: for an observed match, where each component would end it and why.

A match ends on the deepest walked node every component accepts. When the event bus
is enabled, ``emit_verdicts`` reports one ``VERDICT`` event per deciding component:
Full's (how far the walk got, and what stopped it) and one per component that
validates matches (``TreeComponent.match_verdict``). Nothing here runs unobserved.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..basics.base_component import FULL
from ..observe.events import Cause, EventKind
from ..basics.keys import TOKEN_BYTES, RadixKey, unpack_tokens
from .walk import WalkStop, walk_stop

if TYPE_CHECKING:
    from .component_api import TreeAPI
    from .node import TreeNode

SHOWN_IDS = 4  # node ids named before a list is cut short


def node_ids_text(nodes: list[TreeNode]) -> str:
    """``#7, #9``; a long list as ``#7, #8, #9 … #40 (12 nodes)``."""
    if len(nodes) <= SHOWN_IDS:
        return ", ".join(f"#{n.id}" for n in nodes)
    head = ", ".join(f"#{n.id}" for n in nodes[: SHOWN_IDS - 1])
    return f"{head} … #{nodes[-1].id} ({len(nodes)} nodes)"


def emit_verdicts(tree: TreeAPI, key: RadixKey, last: TreeNode, split_child: TreeNode | None) -> None:
    """``last``: the deepest node the walk reached (after any split); ``split_child``:
    the node the walk split, whose lower part it did not match (None: no split)."""
    path: list[TreeNode] = []
    node = last
    while node is not tree.root:
        path.append(node)
        node = node.parent
    path.reverse()
    ends = [0]
    for node in path:
        ends.append(ends[-1] + node.length)
    bus = tree.events
    bus.emit(EventKind.VERDICT, FULL, last.id, Cause.REQUEST, ends[-1], _full_reason(tree, key, last, ends[-1], split_child))
    for component in tree.components[1:]:
        if path:
            verdict = component.match_verdict(path)
        else:  # nothing walked: a validating component can only accept the root
            verdict = None if component.create_match_validator() is None else (-1, "no node to validate")
        if verdict is None:
            continue
        best, why = verdict
        node_id = path[best].id if best >= 0 else tree.root.id
        bus.emit(EventKind.VERDICT, component.name, node_id, Cause.REQUEST, ends[best + 1], why)


def _full_reason(tree: TreeAPI, key: RadixKey, last: TreeNode, walked: int, split_child) -> str:
    """What stopped Full's walk: the key ran out, a node diverged, or no child matched."""
    ps = tree.page_size
    total = len(key.data) // TOKEN_BYTES
    aligned = total - total % ps
    tail = f"unaligned tail of {total - aligned} tokens (page {ps})" if total > aligned else ""
    stop = walk_stop(walked, aligned, split_child is not None)
    if stop is WalkStop.PARTIAL:
        matched, whole = last.length, last.length + split_child.length
        if walked == aligned:
            reason = f"key ends inside node #{split_child.id} ({matched} of {whole} tokens, split needed)"
        else:
            reason = f"node #{split_child.id} matched {matched} of {whole} tokens (split needed)"
    elif stop is WalkStop.NO_CHILD:
        page = unpack_tokens(key.data[walked * TOKEN_BYTES : (walked + ps) * TOKEN_BYTES])
        what = f"token {page[0]}" if ps == 1 else "page [" + " ".join(map(str, page)) + "]"
        reason = f"no child for {what} under node #{last.id}"
        if key.extra_key is not None:
            reason += f" in namespace {key.extra_key!r}"
    else:
        return tail or ("key ends" if total else "empty key")
    return f"{reason}; {tail}" if tail else reason
