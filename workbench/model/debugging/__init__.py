"""Debugging a run: the cursor a viewer moves through its states (to breakpoints), why (causes from events), breakpoint conditions, regression-test export."""
