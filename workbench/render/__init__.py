"""Rendering: the text report, the tree view and (later) the TUI and SVG export. They
read the model (``workbench.model``) and never reach into the cache."""
