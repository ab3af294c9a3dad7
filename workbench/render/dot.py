"""DOT and SVG pictures of a timeline state (``urc svg``), drawn from ``graph.py``.

Each node is an HTML-like table: a header (``#id``, tokens, the first tokens) and one
row per component (value length or ✝, lock_ref, LRU rank, a ``§n`` session badge). Ids
are ``n<id>`` and every node carries CSS classes for what it is (``tombstone-swa``,
``locked``, ``evictable-leaf``, ``session-held``, ``session-frontier``) and what the step
did to it (``changed-added`` …), plus a tooltip
with the full details, so SVGs diff cleanly and can be post-processed. Output is
deterministic: nodes in tree order, attributes sorted, no generated ids. A file's text
(the scenario's name, ids, namespaces) is ``printable`` and escaped for DOT and XML, so
the SVG stays valid XML whatever it holds.
"""

from __future__ import annotations

import html
import re
from typing import Optional

import graphviz
import networkx as nx

from cache.components import COMPONENT_REGISTRY

from ..model.scenarios.errors import printable
from ..model.timeline.fmt import KEY_HEAD, KEY_SHOW_ALL, KEY_TAIL, plural, tokens_text
from ..model.timeline.shown_tree import CHANGE_MEANING, CHANGE_ORDER
from .tree_view import session_badge

FONT = "Helvetica"
CHANGE_FILL = {  # what the step did: a fill per change kind (the model's CHANGE_ORDER picks one)
    "added": "#d9f2d9", "split": "#fff2b3", "tombstoned": "#e6e0f0", "recovered": "#d6f0f5",
    "lock_ref": "#fde2c8", "removed": "#f2f2f2", "value": "#f5f5dc", "lru": "#edf2f8",
}
COMPONENT_COLOR = dict(zip(COMPONENT_REGISTRY, ("#1f6fb2", "#8e3b9e", "#2e7d32")))  # in registry order
HOST_FILL = "#1565c0"  # a host-only value: white on blue, as in the tree view
SESSION_COLOR = "#e65100"  # a session badge, §n, as the tree view's
LEGEND = [  # (label, fill, border, style): identical on every picture; every change kind, in the model's order
    *((CHANGE_MEANING[k], CHANGE_FILL[k], "#9e9e9e" if k == "removed" else "black",
       "dashed" if k == "removed" else "solid") for k in CHANGE_ORDER),
    ("locked (lock n: lock_ref)", "white", "#c62828", "bold"),
    ("evictable leaf", "white", "#2e7d32", "solid"),
]


def _html(text: object) -> str:
    """Text in an HTML-like label: printable, its markup characters escaped."""
    return html.escape(printable(text))


def _plain(text: str) -> str:
    """Text in a plain attribute (the caption, a tooltip): printable, backslashes literal
    (not DOT escapes), and no ``&`` that Graphviz would decode as an entity (``&#27;`` is
    ESC, which XML forbids)."""
    return graphviz.escape(printable(text, lines=True).replace("&", "&amp;"))


def to_dot(graph: nx.DiGraph, caption: str, name: str = "state", requests: tuple = (), request_diff=None,
           sessions: tuple = ()) -> graphviz.Digraph:
    dot = graphviz.Digraph(name=name, graph_attr={"rankdir": "TB", "labelloc": "t", "label": _plain(caption),
                                                  "fontname": FONT, "nodesep": "0.25", "ranksep": "0.35"},
                           node_attr={"shape": "plain", "fontname": FONT, "fontsize": "10"},
                           edge_attr={"arrowsize": "0.6", "color": "#666666"})
    components = graph.graph["components"]
    for node in nx.dfs_preorder_nodes(graph, graph.graph["root"]):
        data = graph.nodes[node]
        if data["kind"] == "folded":
            _folded(dot, node, data)
        else:
            _node(dot, node, data, components, is_root=node == graph.graph["root"])
        for child in graph.successors(node):
            style = "dashed" if graph.nodes[child]["kind"] == "ghost" else "solid"
            dot.edge(node, child, style=style)
    facts = [f for _, d in graph.nodes(data=True) for f in d.get("components", {}).values()]
    host = any(f.get("host") is not None for f in facts)
    _legend(dot, components, host, any(f["session_ref"] or f["session_ids"] for f in facts))
    _requests(dot, requests, request_diff)
    _sessions(dot, sessions)
    return dot


def _node(dot: graphviz.Digraph, name: str, data: dict, components: tuple[str, ...], is_root: bool) -> None:
    if is_root:  # always there, always locked once per component: just the anchor
        dot.node(name, label=f'<<TABLE BORDER="1" CELLBORDER="0" CELLPADDING="3"><TR><TD><B>root</B> '
                             f'({_html(", ".join(components))})</TD></TR></TABLE>>',
                 id=name, tooltip="the root: an empty key, locked once per component", **{"class": "root"})
        return
    ghost = data["kind"] == "ghost"
    locked = any(c["lock_ref"] > 0 for c in data["components"].values())
    fill = CHANGE_FILL[data["mark"]] if data["mark"] else "white"
    border = "#9e9e9e" if ghost else "#c62828" if locked else "#2e7d32" if data["evictable_leaf"] else "black"
    members = data["members"]
    title = f"#{data['id']}" + (f" +{len(members) - 1}" if len(members) > 1 else "")
    head = f" {data['tokens']}t {_html(_head(data))}"
    if data["extra_key"] is not None:  # the namespace, as the tree panel shows it
        head += f' <FONT COLOR="#8d6e00">ns={_html(str(data["extra_key"]))}</FONT>'
    if data.get("cache_salt") is not None:
        head += f' <FONT COLOR="#8d6e00">salt={_html(str(data["cache_salt"]))}</FONT>'
    if data.get("policy"):  # what the eviction policy reads of it, as the tree panel shows it
        head += f' <FONT COLOR="#8d6e00">{_html(data["policy"])}</FONT>'
    rows = [f'<TR><TD COLSPAN="4" ALIGN="LEFT"><B>{_html(title)}</B>{head}</TD></TR>']
    for comp in components:
        facts = data["components"][comp]
        color = COMPONENT_COLOR.get(comp, "black")
        host = facts.get("host")
        value = "✝" if facts["len"] is None else str(facts["len"])
        cell = "<TD>"
        if facts["len"] is None and host is not None:  # host-only: unmistakable, white on blue
            value, cell = f"<B>HOST {host}</B>", f'<TD BGCOLOR="{HOST_FILL}"><FONT COLOR="white">'
        elif host is not None:
            value += f' <FONT COLOR="{HOST_FILL}">+host</FONT>'
        if facts["session_ref"] or facts["session_ids"]:
            value += f' <FONT COLOR="{SESSION_COLOR}">{_html(session_badge(facts["session_ref"], facts["session_ids"]))}</FONT>'
        transfer = facts["extras"].get("transfer")
        if transfer is not None:
            value += f' <FONT COLOR="#8e24aa">{"⇡" if transfer == "backup" else "⇣"}{transfer}</FONT>'
        if facts["extras"].get("store"):  # a store to the storage tier in flight
            value += ' <FONT COLOR="#8e24aa">⇊store</FONT>'
        if facts["extras"].get("prefetching"):  # the anchor of a prefetch from storage in flight
            value += ' <FONT COLOR="#8e24aa">⇈prefetch</FONT>'
        close = "</FONT></TD>" if cell != "<TD>" else "</TD>"
        lock = f"lock {facts['lock_ref']}" if facts["lock_ref"] else ""
        rank = f"r{facts['rank']}" if facts["rank"] is not None else ""
        rows.append(f'<TR><TD ALIGN="LEFT"><FONT COLOR="{color}">{comp}</FONT></TD>{cell}{value}{close}'
                    f"<TD>{lock}</TD><TD>{rank}</TD></TR>")
    style = ' STYLE="DASHED"' if ghost else ""
    width = "2" if locked else "1"
    label = (f'<<TABLE BORDER="{width}" CELLBORDER="0" CELLSPACING="0" CELLPADDING="2" BGCOLOR="{fill}" '
             f'COLOR="{border}"{style}>{"".join(rows)}</TABLE>>')
    dot.node(name, label=label, id=name, tooltip=_plain(_tooltip(data, components)),
             **{"class": _classes(data, locked)})


def _head(data: dict) -> str:
    head = data["head"]
    text = tokens_text(head[:-1] + ["…"] if data["tokens"] > len(head) else head) if head else "[]"
    if data.get("key_head") is not None:  # an EAGLE bigram key: the token its first pair begins with
        text = f"[{data['key_head']}|{text[1:]}"
    return text


def _classes(data: dict, locked: bool) -> str:
    classes = ["ghost" if data["kind"] == "ghost" else "tree-node"]
    classes += [f"tombstone-{c}" for c, f in sorted(data["components"].items()) if f["len"] is None]
    classes += [f"host-only-{c}" for c, f in sorted(data["components"].items())
                if f["len"] is None and f.get("host") is not None]
    if locked:
        classes.append("locked")
    if data["evictable_leaf"]:
        classes.append("evictable-leaf")
    if any(f["session_ref"] for f in data["components"].values()):
        classes.append("session-held")
    if any(f["session_ids"] for f in data["components"].values()):
        classes.append("session-frontier")
    if len(data["members"]) > 1:
        classes.append("chain")
    classes += [f"changed-{k}" for k in sorted(data["changes"])]
    return " ".join(classes)


def _key_text(key: bytes, tokens: int) -> str:
    """A node's key, its head and its last tokens and its length said once, unpacking
    only what is shown (a key may hold thousands of tokens)."""
    from cache.basics.keys import TOKEN_BYTES, unpack_tokens

    if tokens <= KEY_SHOW_ALL:
        return tokens_text(unpack_tokens(key))
    head = " ".join(map(str, unpack_tokens(key[: KEY_HEAD * TOKEN_BYTES])))
    tail = " ".join(map(str, unpack_tokens(key[-KEY_TAIL * TOKEN_BYTES :])))
    return f"[{head} … {tail}] ({plural(tokens, 'token')})"


def _tooltip(data: dict, components: tuple[str, ...]) -> str:
    members = data["members"]
    lines = [("nodes " + ", ".join(f"#{m}" for m in members)) if len(members) > 1 else f"node #{data['id']}"]
    if data["parent"] is not None:
        lines.append(f"parent #{data['parent']}")
    lines.append(f"key {_key_text(data['key'], data['tokens'])}")
    for comp in components:
        f = data["components"][comp]
        value = "tombstone" if f["len"] is None else f"value {f['len']}"
        if f.get("host") is not None:
            value += f", host copy {f['host']}" + (" (host-only)" if f["len"] is None else "")
        extras = "".join(f", {k}={v}" for k, v in sorted(f["extras"].items()))
        rank = f", LRU rank {f['rank']}" if f["rank"] is not None else ""
        session = f", session_ref {f['session_ref']}" if f["session_ref"] or f["session_ids"] else ""
        session += f", frontier of {','.join(f['session_ids'])}" if f["session_ids"] else ""
        lines.append(f"{comp}: {value}, lock_ref {f['lock_ref']}{rank}{extras}{session}")
    if data.get("policy"):
        lines.append(f"eviction policy reads: {data['policy']}")
    if data["evictable_leaf"]:
        lines.append(f"evictable leaf: #{members[-1]}" if len(members) > 1 else "evictable leaf")
    if data["changes"]:
        lines.append("this step: " + ", ".join(sorted(data["changes"])))
    return "\n".join(lines)


def _folded(dot: graphviz.Digraph, name: str, data: dict) -> None:
    text = (f"… {plural(data['folded_nodes'], 'node')}, {plural(data['folded_tokens'], 'token')} folded"
            f" ({plural(data['branches'], 'branch', 'branches')})")
    dot.node(name, label=text, id=name, shape="box", style="dashed,rounded", color="#9e9e9e", fontcolor="#616161",
             tooltip=text, **{"class": "folded"})


def _legend(dot: graphviz.Digraph, components: tuple[str, ...], host: bool = False, sessions: bool = False) -> None:
    """The same on every picture; one with host-tier copies or session badges explains them too."""
    with dot.subgraph(name="cluster_legend", graph_attr={"label": "legend", "fontname": FONT, "fontsize": "10",
                                                        "color": "#bdbdbd", "style": "rounded"}) as legend:
        rows = "".join(
            f'<TR><TD BGCOLOR="{fill}" BORDER="1" COLOR="{border}" STYLE="{"DASHED" if style == "dashed" else "SOLID"}">'
            f"&nbsp;&nbsp;&nbsp;</TD><TD ALIGN=\"LEFT\">{_html(label)}</TD></TR>"
            for label, fill, border, style in LEGEND
        )
        rows += ('<TR><TD COLSPAN="2" ALIGN="LEFT">#id +k: k more nodes folded into a chain<BR ALIGN="LEFT"/>'
                 'rows: component, value length or ✝ (tombstone),<BR ALIGN="LEFT"/>'
                 'lock n (lock_ref), LRU rank (r0 = most recent)<BR ALIGN="LEFT"/></TD></TR>')
        if host:
            rows += (f'<TR><TD BGCOLOR="{HOST_FILL}" BORDER="1">&nbsp;&nbsp;&nbsp;</TD><TD ALIGN="LEFT">HOST n: host-only '
                     '(device data evicted, host copy kept)<BR ALIGN="LEFT"/>+host: a host copy too; '
                     '⇡backup / ⇣load: a copy in flight<BR ALIGN="LEFT"/></TD></TR>')
        if sessions:
            rows += (f'<TR><TD><FONT COLOR="{SESSION_COLOR}">§</FONT></TD><TD ALIGN="LEFT">§n: n sessions hold it '
                     '(session_ref); §1=s1: session s1\'s frontier<BR ALIGN="LEFT"/></TD></TR>')
        legend.node("legend", label=f'<<TABLE BORDER="0" CELLSPACING="2">{rows}</TABLE>>', id="legend",
                    **{"class": "legend"})


REQUEST_COLUMNS = ("req", "prefix", "committed", "inserted", "locked", "row", "priority", "state", "components")


def _requests(dot: graphviz.Digraph, requests: tuple, diff) -> None:
    """The running requests as a small table (the model's ``request_cells``), each with
    what the highlighted step(s) did to it; requests those steps ended, dimmed."""
    from ..model.timeline.request_diff import ENDED, request_cells

    ended = [c for c in diff.changes if c.status == ENDED] if diff is not None else []
    if not requests and not ended:
        return
    head = "".join(f'<TD ALIGN="LEFT"><B>{c}</B></TD>' for c in REQUEST_COLUMNS)
    rows = [f"<TR>{head}</TR>"]
    width = len(REQUEST_COLUMNS)
    for view in requests:
        cells = request_cells(view)
        rows.append("<TR>" + "".join(f'<TD ALIGN="LEFT">{_html(cells[c])}</TD>' for c in REQUEST_COLUMNS) + "</TR>")
        change = diff.get(view.rid) if diff is not None else None
        if change is not None:
            rows.append(f'<TR><TD COLSPAN="{width}" ALIGN="LEFT" BGCOLOR="{CHANGE_FILL["lock_ref"]}">'
                        f'{_html("▲ " + "; ".join(change.lines))}</TD></TR>')
    for change in ended:
        rows.append(f'<TR><TD COLSPAN="{width}" ALIGN="LEFT"><FONT COLOR="#757575">'
                    f'{_html(change.text())}</FONT></TD></TR>')
    with dot.subgraph(name="cluster_requests", graph_attr={"label": "running requests", "fontname": FONT,
                                                          "fontsize": "10", "color": "#bdbdbd", "style": "rounded"}) as box:
        box.node("requests", label=f'<<TABLE BORDER="0" CELLSPACING="0" CELLPADDING="2">{"".join(rows)}</TABLE>>',
                 id="requests", tooltip=f"{len(requests)} running", **{"class": "requests"})


def _sessions(dot: graphviz.Digraph, rows: tuple) -> None:
    """The sessions as a small table (the model's ``SessionRow.cells``), beside the requests'."""
    from ..model.timeline.shown_sessions import COLUMNS

    if not rows:
        return
    head = "".join(f'<TD ALIGN="LEFT"><B>{c}</B></TD>' for c in COLUMNS)
    body = [f"<TR>{head}</TR>"]
    for row in rows:
        cells = row.cells()
        body.append("<TR>" + "".join(f'<TD ALIGN="LEFT">{_html(cells[c])}</TD>' for c in COLUMNS) + "</TR>")
    with dot.subgraph(name="cluster_sessions", graph_attr={"label": "sessions", "fontname": FONT,
                                                          "fontsize": "10", "color": "#bdbdbd", "style": "rounded"}) as box:
        box.node("sessions", label=f'<<TABLE BORDER="0" CELLSPACING="0" CELLPADDING="2">{"".join(body)}</TABLE>>',
                 id="sessions", tooltip=plural(len(rows), "session"), **{"class": "sessions"})


def render_svg(dot: graphviz.Digraph) -> str:
    """Run Graphviz's ``dot``; raises ``graphviz.ExecutableNotFound`` when it is missing.
    A ``<text>``'s leading or trailing space is kept as a no-break space: SVG viewers
    drop it, and Graphviz placed the next piece of the line after it ("#6" " 4t")."""
    svg = dot.pipe(format="svg", encoding="utf-8")
    return re.sub(r"(<text\b[^>]*>)([^<]*)(</text>)", _keep_edge_spaces, svg)


def _keep_edge_spaces(match: re.Match) -> str:
    text = match.group(2)
    stripped = text.strip(" ")
    lead, trail = len(text) - len(text.lstrip(" ")), len(text) - len(text.rstrip(" "))
    return match.group(1) + "&#160;" * lead + stripped + "&#160;" * trail + match.group(3) if stripped else match.group(0)


def caption_text(scenario: str, step: int, op: Optional[str], pools, diff_from: Optional[int], config: str = "") -> str:
    what = f"step {step}" + (f": {op}" if op else " (the start)")
    since = f" — changes since step {diff_from} highlighted" if diff_from is not None else ""
    pool_text = "   ".join(
        f"{p.name}: total {p.total}, free {p.available}, evictable {p.evictable}, protected {p.protected}, held {p.held}"
        for p in pools.values()
    )
    config = f"\n{config}" if config else ""
    return f"{scenario} — {what}{since}{config}\n{pool_text}"
