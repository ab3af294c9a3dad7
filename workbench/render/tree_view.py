"""Render an inspection snapshot as a rich tree: SGLang's ``_print_helper``, done well.

Model-side rendering (rich only, no textual): used by ``urc demo`` and ``urc show``.
"""

from __future__ import annotations

from rich.console import Group
from rich.text import Text
from rich.tree import Tree

from cache.snapshot import CacheSnapshot, NodeView

from ..model.fmt import tokens_text

COMPONENT_STYLE = {"full": "cyan", "swa": "magenta", "mamba": "green"}


def abbreviate(tokens: tuple[int, ...]) -> str:
    return tokens_text(tokens)


def node_label(node: NodeView, snapshot: CacheSnapshot) -> Text:
    text = Text()
    text.append(f"#{node.id} ", style="bold")
    text.append(abbreviate(node.key), style="white")
    text.append(f" {node.tokens}t", style="dim")
    if node.extra_key is not None:
        text.append(f" ns={node.extra_key}", style="yellow")
    for name in snapshot.components:
        view = node.components[name]
        style = COMPONENT_STYLE.get(name, "white")
        text.append("  ")
        if view.tombstone:
            text.append(f"{name}:✝", style=f"{style} strike")
        else:
            text.append(f"{name}:{view.value_len}", style=style)
        if view.lock_ref:
            text.append(f" 🔒{view.lock_ref}", style="bold red")
        if view.lru_rank is not None:
            text.append(f" r{view.lru_rank}", style="dim")
        for key, value in view.extras.items():
            text.append(f" {key}={value}", style="yellow")
    if node.evictable_leaf:
        text.append("  leaf", style="dim green")
    return text


def render_tree(snapshot: CacheSnapshot) -> Tree:
    root = snapshot.root
    tree = Tree(Text(f"root  ({', '.join(snapshot.components)}, page {snapshot.page_size})", style="bold"))
    branches = {root.id: tree}
    for node in snapshot.nodes[1:]:
        branches[node.id] = branches[node.parent].add(node_label(node, snapshot))
    return tree


def render_pools(snapshot: CacheSnapshot) -> Text:
    text = Text()
    for i, pool in enumerate(snapshot.pools.values()):
        if i:
            text.append("   ")
        style = COMPONENT_STYLE.get(pool.name, "white")
        text.append(f"{pool.name}", style=f"bold {style}")
        text.append(
            f" total {pool.total}  free {pool.available}  evictable {pool.evictable}  "
            f"protected {pool.protected}  held {pool.held}"
        )
    return text


def render_state(snapshot: CacheSnapshot) -> Group:
    return Group(render_tree(snapshot), render_pools(snapshot))
