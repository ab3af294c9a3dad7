"""The workbench: scenarios, runner, rendering and benchmarks over the cache's
inspection snapshot and event stream."""
