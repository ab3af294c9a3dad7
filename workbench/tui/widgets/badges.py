"""How a node and its change kinds look in the terminal: shared by the tree panel and
the help screen's legend, so the legend always matches what is drawn."""

from __future__ import annotations

from rich.text import Text

from cache.keys import unpack_tokens
from cache.snapshot import NodeRecord

from ...model.fmt import tokens_text

COMPONENT_STYLE = {"full": "cyan", "swa": "magenta", "mamba": "green"}
CHANGE_STYLE = {  # strongest first; one style per node
    "removed": "dim strike",
    "added": "bold black on green",
    "split": "bold black on yellow",
    "tombstoned": "bold white on purple",
    "recovered": "bold black on cyan",
    "lock": "bold black on dark_orange",
}
CHANGE_LEGEND = {
    "added": "added this step", "split": "split this step", "tombstoned": "a component's data became a tombstone",
    "recovered": "a tombstone got its data back", "lock": "lock_ref changed", "removed": "evicted (ghost, one step)",
}


def node_label(record: NodeRecord, components: tuple[str, ...], ranks: dict[str, int | None],
               changes: frozenset[str] = frozenset(), chain: int = 0) -> Text:
    """``#7 [1 2 3 … 9] 12t  full:12 🔒1 r3  swa:✝  leaf``"""
    text = Text()
    text.append(f"#{record.id}", style="bold")
    if chain:
        text.append(f" +{chain}", style="bold dim")
    text.append(" " + tokens_text(unpack_tokens(record.key)) + f" {len(record.key) // 4}t", style="default")
    for name, comp in zip(components, record.components):
        style = COMPONENT_STYLE.get(name, "white")
        text.append("  ")
        text.append(f"{name}:✝" if comp.value_len is None else f"{name}:{comp.value_len}", style=style)
        if comp.lock_ref:
            text.append(f" 🔒{comp.lock_ref}", style="bold red")
        rank = ranks.get(name)
        if rank is not None:
            text.append(f" r{rank}", style="dim")
    if record.evictable_leaf:
        text.append("  leaf", style="green")
    style = next((CHANGE_STYLE[k] for k in CHANGE_STYLE if k in changes), None)
    if style:
        text.stylize(style)
    return text
