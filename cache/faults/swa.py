"""Faults in the swa component's behaviour (see the package docstring for the rules)."""

from __future__ import annotations

from . import Fault, fired  # noqa: F401  (installers call fired)

FAULTS: list[Fault] = []
