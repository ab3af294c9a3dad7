"""Scenario files: reading and checking them (schema 1) and the names their steps define, writing them, live commands, generated traces, and output files that never replace a user's file."""
