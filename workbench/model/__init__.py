"""The workbench's model: scenarios, the cache driver that runs ops, the runner and its
timeline of states, diffs and JSON export. Plain Python over the cache's snapshot and
event stream — no rich, no textual — so every view (text report, TUI, SVG) renders
the same model and the model can be tested without a screen."""
