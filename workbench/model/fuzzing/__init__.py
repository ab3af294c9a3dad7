"""Fuzzing: generated op sequences checked step by step, and shrinking a failure."""
