"""Components and their registry: a new component is one file plus one line here."""

from .base import TreeComponent
from .full import FullComponent

COMPONENT_REGISTRY: dict[str, type[TreeComponent]] = {
    "full": FullComponent,
}

__all__ = ["COMPONENT_REGISTRY", "FullComponent", "TreeComponent"]
