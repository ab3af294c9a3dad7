"""Debugging a run: why (causes from events), breakpoints, regression-test export."""
