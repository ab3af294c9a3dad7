"""Where each panel sits: one line per panel (its area, widget class, id and border
title). The app composes the screen from ``LAYOUT``, so a new panel is one widget
module and one line here."""

from __future__ import annotations

import dataclasses

from .widgets.banner import Banner
from .widgets.divergence_banner import DivergenceBanner
from .widgets.events_panel import EventsPanel
from .widgets.inspector import Inspector
from .widgets.lru_panel import LRUPanel
from .widgets.metrics_panel import MetricsPanel
from .widgets.panel import Panel
from .widgets.pools_panel import PoolsPanel
from .widgets.requests_panel import RequestsPanel
from .widgets.sessions_panel import SessionsPanel
from .widgets.step_list import StepList
from .widgets.step_panel import StepPanel
from .widgets.tree_panel import TreePanel


@dataclasses.dataclass(frozen=True)
class Slot:
    """One panel on screen: its area (``top``: full-width banners; ``main``: the left
    column; ``middle`` and ``side``: the columns beside it; ``bottom``: the lower row),
    its widget class (a ``Panel``), its id (workbench.tcss styles it) and border title."""

    area: str
    panel: type[Panel]
    id: str
    title: str = ""


AREAS = ("top", "main", "middle", "side", "bottom")
LAYOUT: tuple[Slot, ...] = (
    Slot("top", Banner, "banner"),
    Slot("top", DivergenceBanner, "divergence"),
    Slot("main", StepList, "steps", "steps"),
    Slot("middle", StepPanel, "step", "step"),
    Slot("middle", TreePanel, "tree", "tree"),
    Slot("middle", RequestsPanel, "requests", "requests"),
    Slot("middle", SessionsPanel, "sessions", "sessions"),  # shown only when the scenario uses sessions
    Slot("side", Inspector, "inspector", "node"),
    Slot("side", EventsPanel, "events", "events"),
    Slot("bottom", PoolsPanel, "pools", "pools"),
    Slot("bottom", MetricsPanel, "metrics", "metrics"),
    Slot("bottom", LRUPanel, "lru", "LRU"),
)
