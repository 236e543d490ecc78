"""gym's benchmark harness: ``python -m benchmarks`` (see docs/performance.md)."""
