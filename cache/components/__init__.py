"""Components and their registry: a new component is one file plus one line here."""

from .base import TreeComponent
from .full import FullComponent
from .swa import SWAComponent

COMPONENT_REGISTRY: dict[str, type[TreeComponent]] = {
    "full": FullComponent,
    "swa": SWAComponent,
}

__all__ = ["COMPONENT_REGISTRY", "FullComponent", "SWAComponent", "TreeComponent"]
