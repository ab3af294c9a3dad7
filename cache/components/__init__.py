"""Components and their registry: a new component is one file plus one line here."""

from .base import TreeComponent
from .full import FullComponent
from .mamba import MambaComponent
from .swa import SWAComponent

COMPONENT_REGISTRY: dict[str, type[TreeComponent]] = {
    "full": FullComponent,
    "swa": SWAComponent,
    "mamba": MambaComponent,
}

__all__ = ["COMPONENT_REGISTRY", "FullComponent", "MambaComponent", "SWAComponent", "TreeComponent"]
