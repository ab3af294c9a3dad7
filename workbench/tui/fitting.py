"""The layout rule: each panel gets what its content needs at the terminal's size, the
step's text and the tree first.

- Columns: from 140 columns steps | middle | side as composed; below 140 the steps list
  and the side column narrow; below 120 the side column (node, events) collapses into
  the tab strip, and below 100 the metrics narrow.
- Rows: below 30 rows the bottom row (pools, metrics, LRU) collapses into the strip too.
  A collapsed panel is one key away: ``o`` (or a click on its name) zooms it.
- The middle column: the tree keeps at least ``TREE_ROWS`` rows (12 from 40 rows of
  terminal, else 5); the step panel is as tall as its text (description, result or
  error) up to what that leaves; the requests and sessions panels share the rest (at
  least a line each) and scroll.
- The bottom row grows to a chapter's pools, as far as a quarter of the terminal."""

from __future__ import annotations

from textual.geometry import Size

from .widgets.panel_strip import PanelStrip
from .widgets.step_panel import StepPanel

SIDE, BOTTOM = ("inspector", "events"), ("pools", "metrics", "lru")  # the collapsible panels by area


class Fitting:
    """Mixed into the app: the size classes (workbench.tcss: Screen.-narrow, -collapsed,
    -small, -short), the bottom row's and the middle column's heights, and ``o``."""

    WIDE, COLLAPSE, SMALL, SHORT, TALL = 140, 120, 100, 30, 40
    PANEL_ROWS = 9  # the most the requests or sessions panel takes (it scrolls beyond)

    def on_resize(self, event) -> None:
        width, height = event.size
        screen = self.screen
        screen.set_class(width < self.WIDE, "-narrow")
        screen.set_class(width < self.COLLAPSE, "-collapsed")
        screen.set_class(width < self.SMALL, "-small")
        screen.set_class(height < self.SHORT, "-short")
        if self.is_mounted:
            self.query_one(PanelStrip).collapse(self.collapsed_panels())
            self._fit_bottom()
            self.call_after_refresh(self.fit_middle)  # widths are known after the relayout

    def collapsed_panels(self) -> list:
        width, height = self.size
        ids = (SIDE if width < self.COLLAPSE else ()) + (BOTTOM if height < self.SHORT else ())
        return [p for p in self.panels if p.id in ids and p.display]

    def _fit_pools(self, pools: int) -> None:
        """A host tier adds a pool per component: the bottom row grows to show them
        all, once per chapter that needs it (never a relayout per step)."""
        rows = max(4, pools)
        if rows != self._bottom_rows:
            self._bottom_rows = rows
            self._fit_bottom()

    def _fit_bottom(self) -> None:
        height = self._bottom_rows + 3  # the table's header and the borders
        self.query_one("#bottom").styles.height = min(height, max(6, self.size.height // 4))

    def fit_middle(self) -> None:
        """The middle column's heights: the tree's floor, the step's text, the rest shared."""
        middle = self.query_one("#middle")
        rows = middle.size.height
        step = self.query_one(StepPanel)
        width = step.scrollable_content_region.width or step.size.width - 4
        if rows <= 0 or width <= 0:
            return
        others = [p for p in self.panels if p.id in ("requests", "sessions") and p.display]
        floor = 12 if self.size.height >= self.TALL else 5
        tree_panel = self.query_one("#tree")
        # a wide tree's scrollbar takes a row (a vertical scrollbar can make it wide; a short
        # terminal's narrow tree always keeps the row for it)
        scrollbar = int(self.size.height < self.TALL or tree_panel.show_horizontal_scrollbar
                        or tree_panel.virtual_size.width > tree_panel.size.width - 4)
        tree = floor + 2 + scrollbar
        text = step.query_one(".panel-text")
        width -= 2  # measured as if its scrollbar showed, so the text is never a row short
        wanted = text.get_content_height(Size(width, rows), Size(width, rows), width) + 2
        step_rows = max(3, min(wanted, rows - tree - 3 * len(others)))
        if step.styles.height is None or step.styles.height.value != step_rows:
            step.styles.height = step_rows
        share = max(3, (rows - tree - step_rows) // max(1, len(others)))
        for panel in others:
            panel.styles.max_height = min(self.PANEL_ROWS, share)

    def action_open_collapsed(self) -> None:
        """Zoom the next panel the terminal's size collapsed into the strip; after the
        last, put the screen back."""
        collapsed = self.collapsed_panels()
        if not collapsed:
            self.notify("no panel is collapsed at this size (z zooms the focused panel)")
            return
        screen = self.screen
        now = screen.maximized
        at = collapsed.index(now) + 1 if now in collapsed else 0
        if now is not None:
            screen.minimize()
        if at < len(collapsed):
            self.open_panel(collapsed[at])

    def open_panel(self, panel) -> None:
        self.screen.maximize(panel, container=False)
        panel.focus()
