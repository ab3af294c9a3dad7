"""A timeline state as a networkx ``DiGraph``: the model every picture is drawn from.

Nodes are ``n<id>`` (stable across steps, so two pictures diff cleanly), one per row
of ``model.shown_tree`` — the same rows the TUI's tree panel shows: single-child
chains already folded, removed nodes of a diff as ghosts — with their facts as
attributes. Subtree sizes and elision are graph operations here, so the DOT writer
only draws.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Optional

import networkx as nx

from cache.basics.keys import TOKEN_BYTES, unpack_tokens

from ..model.timeline.diff import StateDiff
from ..model.timeline.shown_tree import ShownNode, ShownTree
from ..model.timeline.states import TimelineState

HEAD_TOKENS = 4  # tokens shown in a node's header


def node_name(node_id: int) -> str:
    return f"n{node_id}"


def state_graph(state: TimelineState, diff: Optional[StateDiff] = None) -> nx.DiGraph:
    """Every row of ``state``'s tree view (``ShownTree``), in its preorder, so DOT
    output is deterministic; ``graph.graph["folded"]`` counts the nodes folded into
    chains."""
    tree = ShownTree(state, diff)
    graph = nx.DiGraph(components=state.components, page_size=state.page_size, root=node_name(state.root_id))
    folded = 0
    for row in tree.walk():
        graph.add_node(node_name(row.id), **_facts(row))
        folded += row.folded
        for child in tree.shown_children(row.id):
            graph.add_edge(node_name(row.id), node_name(child))
    graph.graph["folded"] = folded
    return graph


def _facts(row: ShownNode) -> dict:
    components = {c.name: {"len": c.value_len, "lock_ref": c.lock_ref, "rank": c.rank_text, "extras": dict(c.extras),
                           "host": c.host_len,  # the host tier's copy (None: none)
                           "session_ref": c.session_ref, "session_ids": c.session_ids}
                  for c in row.components}
    return {
        "kind": "ghost" if row.ghost else "node",
        "id": row.id,
        "members": row.members,
        "tokens": row.tokens,
        "head": unpack_tokens(row.key[: TOKEN_BYTES * (HEAD_TOKENS + 1)]),
        "key": row.key,
        "extra_key": row.extra_key,
        "cache_salt": row.cache_salt,
        "key_head": row.key_head,
        "parent": row.parent,
        "evictable_leaf": row.evictable_leaf,
        "policy": row.policy_badge,  # what Full's eviction policy reads of it ("prio 3", "2 hits"), or ""
        "components": components,
        "changes": row.changes,
        "mark": row.mark,
    }


def subtree_sizes(graph: nx.DiGraph) -> None:
    """Annotate each node with the nodes and tokens of its subtree (itself included)."""
    for name in nx.dfs_postorder_nodes(graph, graph.graph["root"]):
        data = graph.nodes[name]
        kids = [graph.nodes[c] for c in graph.successors(name)]
        data["subtree_nodes"] = len(data["members"]) + sum(k["subtree_nodes"] for k in kids)
        data["subtree_tokens"] = data["tokens"] + sum(k["subtree_tokens"] for k in kids)


def elide(graph: nx.DiGraph, max_nodes: int, max_leaves: Optional[int] = None) -> int:
    """Keep at most ``max_nodes`` drawn nodes, and (``max_leaves``) at most that many side
    by side: the root, every changed node and its ancestors first, then breadth first,
    a node going on below its parent freely but beside a sibling only while the leaves
    stay within ``max_leaves`` (a drawing is as wide as its leaves). Each parent's dropped
    subtrees become one placeholder saying what it holds. Returns how many tree nodes
    were folded away."""
    root = graph.graph["root"]
    if graph.number_of_nodes() <= max_nodes and (max_leaves is None or _leaves(graph) <= max_leaves):
        return 0
    if "subtree_nodes" not in graph.nodes[root]:
        subtree_sizes(graph)
    keep = {root}
    for name, data in list(graph.nodes(data=True)):
        if data["changes"] and len(keep) < max_nodes:
            keep.update(_up_to_kept(graph, name, keep))
    kept_children = {name: sum(1 for c in graph.successors(name) if c in keep) for name in keep}
    leaves = sum(1 for n in keep if not kept_children[n])
    for name in nx.bfs_tree(graph, root):
        if len(keep) >= max_nodes:
            break
        if name in keep:
            continue
        parent = next(iter(graph.predecessors(name)))
        if parent not in keep:
            continue  # its parent did not fit: neither does it
        beside = kept_children[parent] > 0  # a new leaf beside a sibling widens the picture
        if beside and max_leaves is not None and leaves >= max_leaves:
            continue
        keep.add(name)
        kept_children[parent] += 1
        kept_children[name] = 0
        leaves += beside
    dropped = 0
    for parent in list(keep):
        cut = [c for c in graph.successors(parent) if c not in keep]
        if not cut:
            continue
        nodes = sum(graph.nodes[c]["subtree_nodes"] for c in cut)
        tokens = sum(graph.nodes[c]["subtree_tokens"] for c in cut)
        dropped += nodes
        placeholder = f"f{parent[1:]}"
        graph.add_node(placeholder, kind="folded", folded_nodes=nodes, folded_tokens=tokens, branches=len(cut),
                       changes=frozenset(), members=())
        graph.add_edge(parent, placeholder)
    graph.remove_nodes_from([n for n in list(graph) if n not in keep and graph.nodes[n]["kind"] != "folded"])
    return dropped


def _leaves(graph: nx.DiGraph) -> int:
    return sum(1 for n in graph if graph.out_degree(n) == 0)


def _up_to_kept(graph: nx.DiGraph, name: str, keep: set[str]) -> Iterable[str]:
    """``name`` and its ancestors up to the first one already kept."""
    path = []
    while name not in keep:
        path.append(name)
        parents = list(graph.predecessors(name))
        if not parents:
            break
        name = parents[0]
    return path
