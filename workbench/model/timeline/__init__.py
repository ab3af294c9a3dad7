"""Running a scenario and what it leaves: the session, the runner, the recorded states, the cursor the TUI moves, diffs, JSON export, event phrasing, a whole run's series."""
