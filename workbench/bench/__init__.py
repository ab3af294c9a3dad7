"""Benchmarks: the synthetic workload, the caller's-path replay, the floor, the timeline, the TUI and the fuzzer's rate (urc bench)."""
