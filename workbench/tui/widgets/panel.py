"""What every panel is: a widget with ``show(view)``, given one ``model.step_view.StepView``
per step. Adding a panel is a module with such a widget and one line in the app's
``LAYOUT``; the app never calls a panel any other way on a step."""

from __future__ import annotations

from typing import ClassVar

from textual.containers import VerticalScroll
from textual.widgets import Static

from ...model.timeline.step_view import StepView


class Panel:
    """Mixed in before the Textual widget class (``class LRUPanel(Panel, Static)``). Every
    panel takes focus (tab reaches it, its keys scroll it, ``z`` zooms it)."""

    can_focus = True
    ALLOW_MAXIMIZE = True

    follows_selection: ClassVar[bool] = False  # shown again when the user selects another node
    follows_session: ClassVar[bool] = False  # shown again when the user highlights another session

    def show(self, view: StepView) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement show(view)")


class TextPanel(Panel, VerticalScroll):
    """A panel of text that scrolls when the text does not fit (nothing is cut): ``put``
    replaces the text, ``content`` reads it back."""

    def compose(self):
        yield Static(classes="panel-text")

    def put(self, renderable) -> None:
        self.query_one(".panel-text", Static).update(renderable)

    @property
    def content(self):
        return self.query_one(".panel-text", Static).content
