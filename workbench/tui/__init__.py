"""The Textual workbench (``urc tui``): thin widgets over ``workbench.model.debugging.cursor``."""
