"""A timeline state as a networkx ``DiGraph``: the model every picture is drawn from.

Nodes are ``n<id>`` (stable across steps, so two pictures diff cleanly) with their
facts as attributes; removed nodes of a diff come back as ghosts. Subtree sizes,
chain collapsing and elision are graph operations here, so the DOT writer only draws.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Optional

import networkx as nx

from cache.keys import unpack_tokens

from ..model.diff import StateDiff
from ..model.states import TimelineState

HEAD_TOKENS = 4  # tokens shown in a node's header


def node_name(node_id: int) -> str:
    return f"n{node_id}"


def state_graph(state: TimelineState, diff: Optional[StateDiff] = None) -> nx.DiGraph:
    """Every node of ``state`` with per-component facts; with ``diff``, each node's
    change kinds and the removed nodes as ghosts under their old parents."""
    graph = nx.DiGraph(components=state.components, page_size=state.page_size, root=node_name(state.root_id))
    stack = [state.root_id]
    while stack:  # preorder in the tree's child order, so DOT output is deterministic
        node_id = stack.pop()
        record = state.record(node_id)
        graph.add_node(node_name(node_id), **_facts(state, record, diff))
        if record.parent is not None:
            graph.add_edge(node_name(record.parent), node_name(node_id))
        stack.extend(reversed(state.children(node_id)))
    if diff is not None:
        for node_id, record in sorted(diff.ghosts.items()):
            parent = node_name(record.parent) if record.parent is not None else graph.graph["root"]
            if parent not in graph:
                parent = graph.graph["root"]
            facts = _facts(state, record, None, ranked=False)
            facts.update(kind="ghost", changes=frozenset({"removed"}))
            graph.add_node(node_name(node_id), **facts)
            graph.add_edge(parent, node_name(node_id))
    return graph


def _facts(state: TimelineState, record, diff: Optional[StateDiff], ranked: bool = True) -> dict:
    tokens = unpack_tokens(record.key[: 4 * (HEAD_TOKENS + 1)])
    components = {}
    for name, comp in zip(state.components, record.components):
        components[name] = {
            "len": comp.value_len,
            "lock_ref": comp.lock_ref,
            "rank": state.rank(name, record) if ranked else None,
            "extras": dict(comp.extras),
            "host": comp.host_len,  # the host tier's copy (None: none)
        }
    return {
        "kind": "node",
        "id": record.id,
        "members": (record.id,),
        "tokens": len(record.key) // 4,
        "head": tokens,
        "key": record.key,
        "parent": record.parent,
        "evictable_leaf": record.evictable_leaf,
        "components": components,
        "changes": diff.kinds(record.id) if diff is not None else frozenset(),
    }


def subtree_sizes(graph: nx.DiGraph) -> None:
    """Annotate each node with the nodes and tokens of its subtree (itself included)."""
    for name in nx.dfs_postorder_nodes(graph, graph.graph["root"]):
        data = graph.nodes[name]
        kids = [graph.nodes[c] for c in graph.successors(name)]
        data["subtree_nodes"] = len(data["members"]) + sum(k["subtree_nodes"] for k in kids)
        data["subtree_tokens"] = data["tokens"] + sum(k["subtree_tokens"] for k in kids)


def collapse_chains(graph: nx.DiGraph) -> int:
    """Fold each run of single-child nodes whose component states agree (same
    tombstones and locks, nothing changed, no ghost) into its top node; returns how
    many nodes were folded. The top node keeps its id; ``members`` lists them all."""
    folded = 0
    for name in list(nx.dfs_preorder_nodes(graph, graph.graph["root"])):
        if name not in graph or name == graph.graph["root"]:
            continue
        top = graph.nodes[name]
        while True:
            kids = list(graph.successors(name))
            if len(kids) != 1 or not _agree(top, graph.nodes[kids[0]]):
                break
            child = kids[0]
            below = graph.nodes[child]
            top["members"] = top["members"] + below["members"]
            top["tokens"] += below["tokens"]
            top["head"] = (top["head"] + below["head"])[: HEAD_TOKENS + 1]
            top["key"] = top["key"] + below["key"]
            top["evictable_leaf"] = below["evictable_leaf"]
            for comp, facts in top["components"].items():
                if facts["len"] is not None:
                    facts["len"] += below["components"][comp]["len"]
                if facts["host"] is not None:
                    facts["host"] += below["components"][comp]["host"]
            for grandchild in list(graph.successors(child)):
                graph.add_edge(name, grandchild)
            graph.remove_node(child)
            folded += 1
    return folded


def _agree(a: dict, b: dict) -> bool:
    if a["kind"] != "node" or b["kind"] != "node" or a["changes"] or b["changes"]:
        return False
    for name, facts in a["components"].items():
        other = b["components"][name]
        if (facts["len"] is None) != (other["len"] is None) or facts["lock_ref"] != other["lock_ref"]:
            return False
        if (facts["host"] is None) != (other["host"] is None):
            return False
        if facts["extras"] or other["extras"]:
            return False
    return True


def elide(graph: nx.DiGraph, max_nodes: int) -> int:
    """Keep at most ``max_nodes`` drawn nodes: the root, every changed node and its
    ancestors first, then breadth first; each parent's dropped subtrees become one
    placeholder saying what it holds. Returns how many tree nodes were folded away."""
    if graph.number_of_nodes() <= max_nodes:
        return 0
    root = graph.graph["root"]
    if "subtree_nodes" not in graph.nodes[root]:
        subtree_sizes(graph)
    keep = {root}
    for name, data in list(graph.nodes(data=True)):
        if data["changes"] and len(keep) < max_nodes:
            keep.update(_up_to_kept(graph, name, keep))
    for name in nx.bfs_tree(graph, root):
        if len(keep) >= max_nodes:
            break
        keep.update(_up_to_kept(graph, name, keep))
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
