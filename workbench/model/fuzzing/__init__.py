"""Fuzzing: generated op sequences checked step by step, shrinking a failure, campaigns across worker processes and the configs swept when none is given."""
