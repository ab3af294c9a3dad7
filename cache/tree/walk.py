"""The one walk down the radix tree along a key, shared by match, peek and insert.

From the root it follows the child filed under the key's next page (and namespace),
compares that child's edge with the key, and goes on below it while the whole edge
matches. The walk itself changes nothing and hands back the path, so each caller keeps
its own side effects along it: match splits a partly matched last node and refreshes
access times, insert also runs the components' hooks step by step, peek does nothing.

It stops for one of three reasons (``WalkStop``), which ``walk_stop`` reads off where
it ended; match verdicts report them as Full's.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Optional

from ..basics.keys import TOKEN_BYTES, common_prefix_tokens

if TYPE_CHECKING:
    from .node import TreeNode


class WalkStop(Enum):
    KEY_ENDS = "key ends"  # every whole page of the key matched
    NO_CHILD = "no child"  # no child holds the key's next page
    PARTIAL = "split needed"  # the last node matched only in part


def walk_key(root: TreeNode, data: bytes, namespace, page_size: int) -> tuple[list[TreeNode], Optional[int]]:
    """The nodes along the key from below ``root`` down, and where the last one must
    be cut: None when it matched whole, else the tokens of it that matched (whole
    pages, fewer than its length). Every other node matched whole.

    ``data``: the key's packed tokens, already cut to whole pages (a trailing partial
    page can never match). A plain list, not (node, tokens) pairs nor a generator, for
    speed; so a caller working along the path may split a node on it (the lower part
    keeps the node and its children, so later nodes stay valid) but not remove one."""
    page_bytes = page_size * TOKEN_BYTES
    limit = len(data)
    nodes = []
    node, off = root, 0
    while off < limit:
        page = data[off : off + page_bytes]
        child = node.children.get(page if namespace is None else (namespace, page))
        if child is None:
            break
        nodes.append(child)
        if not data.startswith(child.key, off):
            matched = common_prefix_tokens(data, off, child.key)
            return nodes, matched - matched % page_size
        off += len(child.key)
        node = child
    return nodes, None


def walk_stop(walked: int, whole_page_tokens: int, partial: bool) -> WalkStop:
    """Why a walk stopped that matched ``walked`` of the key's ``whole_page_tokens``,
    ``partial`` when its last step matched only part of a node."""
    if partial:
        return WalkStop.PARTIAL
    return WalkStop.KEY_ENDS if walked == whole_page_tokens else WalkStop.NO_CHILD


def accepted(validators, node: TreeNode) -> bool:
    """Whether every match validator accepts ``node``; each sees every node, even after
    one refuses, because they keep state along the path."""
    length = node.length
    ok = True
    for validate in validators:  # a loop, not a comprehension: no frame of its own on this hot path
        if not validate(node, length):
            ok = False
    return ok
