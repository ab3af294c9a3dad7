"""How a row of the tree view and its change kinds look in the terminal: shared by the
tree panel, the diff view and the help screen's legend, so the legend always matches
what is drawn. Which rows there are, what they fold and which kind marks them is the
model's (``model.shown_tree``); this only styles them."""

from __future__ import annotations

from rich.text import Text

from cache.observe.views import NodeRecord

from ...model.timeline.packed import PackedTokens
from ...model.timeline.shown_tree import CHANGE_MEANING, CHANGE_ORDER, ShownNode
from ...render.tree_view import COMPONENT_STYLE, badge_line

__all__ = ["CHANGE_LEGEND", "CHANGE_STYLE", "COMPONENT_STYLE", "SESSION_COVERED_STYLE", "SESSION_FRONTIER_STYLE",
           "node_label", "row_label"]
CHANGE_STYLE = {  # one style per change kind, in the model's order (strongest first)
    "added": "bold black on green",
    "split": "bold black on yellow",
    "tombstoned": "bold white on purple",
    "recovered": "bold black on cyan",
    "lock_ref": "bold black on dark_orange",
    "removed": "dim strike",
    "value": "black on wheat1",
    "lru": "italic",
}
CHANGE_LEGEND = CHANGE_MEANING
SESSION_FRONTIER_STYLE = "bold underline on dark_orange3"  # the highlighted session's frontier rows
SESSION_COVERED_STYLE = "underline"  # the rest of what its coverage holds


def row_label(row: ShownNode) -> Text:
    """The tree view's line for a row, styled by the change that marks it."""
    comps = ((c.name, c.value_len, c.lock_ref, c.rank_text, c.extras, c.host_len, c.session_ref, c.session_ids)
             for c in row.components)
    text = badge_line(row.id, PackedTokens(row.key), row.extra_key, comps, row.evictable_leaf, row.folded,
                      row.cache_salt, row.key_head, row.policy_badge, leaf_of=row.bottom)
    if row.mark is not None:
        text.stylize(CHANGE_STYLE[row.mark])
    return text


def node_label(record: NodeRecord, components: tuple[str, ...], ranks: dict[str, int | None],
               changes: frozenset[str] = frozenset()) -> Text:
    """One record on its own line, as a row of it would look."""
    return row_label(ShownNode.of_record(record, components, ranks, changes))
