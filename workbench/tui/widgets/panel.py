"""What every panel is: a widget with ``show(view)``, given one ``model.step_view.StepView``
per step. Adding a panel is a module with such a widget and one line in the app's
``LAYOUT``; the app never calls a panel any other way on a step."""

from __future__ import annotations

from typing import ClassVar

from ...model.timeline.step_view import StepView


class Panel:
    """Mixed in before the Textual widget class (``class LRUPanel(Panel, Static)``)."""

    follows_selection: ClassVar[bool] = False  # shown again when the user selects another node
    follows_session: ClassVar[bool] = False  # shown again when the user highlights another session

    def show(self, view: StepView) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement show(view)")
