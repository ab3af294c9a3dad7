"""How a node and its change kinds look in the terminal: shared by the tree panel and
the help screen's legend, so the legend always matches what is drawn."""

from __future__ import annotations

from rich.text import Text

from cache.keys import unpack_tokens
from cache.snapshot import NodeRecord

from ...render.tree_view import COMPONENT_STYLE, badge_line

__all__ = ["CHANGE_LEGEND", "CHANGE_STYLE", "COMPONENT_STYLE", "node_label"]
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
    """The tree view's line for a record, styled by the strongest change the step made."""
    comps = ((name, c.value_len, c.lock_ref, ranks.get(name), c.extras, c.host_len)
             for name, c in zip(components, record.components))
    text = badge_line(record.id, unpack_tokens(record.key), record.extra_key, comps, record.evictable_leaf, chain)
    style = next((CHANGE_STYLE[k] for k in CHANGE_STYLE if k in changes), None)
    if style:
        text.stylize(style)
    return text
