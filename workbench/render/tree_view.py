"""Render an inspection snapshot as a rich tree: SGLang's ``_print_helper``, done well.

Model-side rendering (rich only, no textual): used by ``urc demo`` and ``urc show``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Optional

from rich.console import Group
from rich.text import Text
from rich.tree import Tree

from cache.components import COMPONENT_REGISTRY
from cache.observe.views import CacheSnapshot, NodeView

from ..model.scenarios.errors import printable
from ..model.timeline.fmt import key_text, tokens_text
from ..model.timeline.shown_tree import eviction_order_text, policy_badge

COMPONENT_STYLE = dict(zip(COMPONENT_REGISTRY, ("cyan", "magenta", "green")))  # in registry order
SESSION_STYLE = "bold dark_orange"  # a session badge, §n


def abbreviate(tokens: tuple[int, ...]) -> str:
    return tokens_text(tokens)


def node_label(node: NodeView, snapshot: CacheSnapshot) -> Text:
    comps = ((name, v.value_len, v.lock_ref, v.lru_rank, tuple(v.extras.items()), v.host_len, v.session_ref,
              v.session_ids)
             for name, v in ((name, node.components[name]) for name in snapshot.components))
    return badge_line(node.id, node.key, node.extra_key, comps, node.evictable_leaf,
                      cache_salt=node.cache_salt, key_head=node.key_head,
                      policy=policy_badge(snapshot.eviction_policy, node.priority, node.hit_count))


def badge_line(node_id: int, key, extra_key: Optional[str], components: Iterable[tuple], evictable_leaf: bool,
               chain: int = 0, cache_salt: Optional[str] = None, key_head: Optional[int] = None,
               policy: str = "", leaf_of: Optional[int] = None) -> Text:
    """``#7 [1 2 3] 3t  full:3 🔒1 r0  swa:✝  leaf``: one node with a badge per component
    (name, value length or None, lock_ref, LRU rank or None, extras[, host copy length[,
    session_ref, session_ids]]) — every view's line. With a host tier a copy shows as
    ``+host``, and a host-only node (device data evicted, host copy kept) as a reversed
    ``full:HOST 3`` badge; a node sessions hold shows ``§n`` (session_ref), and a
    session's frontier names it, ``§1=s1``. A salted node shows ``salt=S`` beside its
    namespace; an EAGLE bigram key shows the token its first pair begins with: ``[3|4 5]``
    (its length counts pairs). ``policy`` is what Full's eviction policy reads of the node
    (``prio 3``, ``2 hits``: shown_tree.policy_badge). A folded chain (``chain`` nodes
    below the top) shows its ranks as a range (``r6–1``) and names the member its leaf
    flag is about (``leaf #6``, ``leaf_of``): only the chain's bottom can be a leaf."""
    text = Text()
    text.append(f"#{node_id} ", style="bold")
    if chain:
        text.append(f"+{chain} ", style="bold dim")
    text.append(key_text(key, key_head, counted=False), style="white")  # counted once, just after
    text.append(f" {len(key)}t", style="dim")
    if extra_key is not None:
        text.append(f" ns={printable(extra_key)}", style="yellow")
    if cache_salt is not None:
        text.append(f" salt={printable(cache_salt)}", style="yellow")
    for name, value_len, lock_ref, rank, extras, *more in components:
        style = COMPONENT_STYLE.get(name, "white")
        host_len = more[0] if more else None
        session_ref, session_ids = (more[1], more[2]) if len(more) > 2 else (0, ())
        text.append("  ")
        if value_len is None and host_len is not None:
            text.append(f"{name}:HOST {host_len}", style="bold white on blue")
        elif value_len is None:
            text.append(f"{name}:✝", style=f"{style} strike")
        else:
            text.append(f"{name}:{value_len}", style=style)
            if host_len is not None:
                text.append(" +host", style="blue")
        if lock_ref:
            text.append(f" 🔒{lock_ref}", style="bold red")
        if session_ref or session_ids:
            text.append(" " + session_badge(session_ref, session_ids), style=SESSION_STYLE)
        if rank is not None:
            text.append(f" r{rank}", style="dim")
        for k, value in extras:
            if k == "transfer":  # a host-tier copy in flight until a flush
                text.append(f" {'⇡' if value == 'backup' else '⇣'}{value}", style="bold magenta")
            elif k == "store":  # stores to the storage tier in flight, host-locking the node
                text.append(" ⇊store" + (f"×{value}" if value != 1 else ""), style="bold magenta")
            elif k == "prefetching":  # the anchor of prefetches from storage in flight, host-locked by them
                text.append(" ⇈prefetch" + (f"×{value}" if value != 1 else ""), style="bold magenta")
            else:
                text.append(f" {k}={printable(value)}", style="yellow")
    if policy:
        text.append(f"  {policy}", style="yellow")
    if evictable_leaf:
        text.append(f"  leaf #{leaf_of}" if chain and leaf_of is not None else "  leaf", style="dim green")
    return text


def session_badge(session_ref: int, session_ids: tuple[str, ...]) -> str:
    """``§2`` (two sessions' coverage holds it), ``§1=s1`` (and it is s1's frontier)."""
    return f"§{session_ref}" + (f"={printable(','.join(session_ids))}" if session_ids else "")


def render_tree(snapshot: CacheSnapshot) -> Tree:
    root = snapshot.root
    tree = Tree(Text(f"root  ({', '.join(snapshot.components)}, page {snapshot.page_size})", style="bold"))
    branches = {root.id: tree}
    for node in snapshot.nodes[1:]:
        branches[node.id] = branches[node.parent].add(node_label(node, snapshot))
    return tree


def render_eviction_order(snapshot: CacheSnapshot) -> Text:
    """Full's evictable leaves in the order its policy evicts them (empty under lru)."""
    line = eviction_order_text(snapshot)
    head, _, rest = line.partition(": ")
    return Text.assemble((f"{head}: ", "bold cyan"), rest) if line else Text()


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
    storage = getattr(snapshot, "storage", None)
    if storage is not None:  # the storage tier below the host (cache/tiers/storage.py)
        text.append("   storage", style="bold magenta")
        text.append(f" {storage.backend}  pages {len(storage.keys)}  storing {len(storage.in_flight)}")
        if storage.prefetches:
            text.append("  prefetching " + ", ".join(f"{printable(rid)} ({tokens}t, {stage})" for rid, _, tokens, stage
                                                      in storage.prefetches))
    return text


def render_state(snapshot: CacheSnapshot) -> Group:
    order = render_eviction_order(snapshot)
    return Group(render_tree(snapshot), render_pools(snapshot), *([order] if order else []))
