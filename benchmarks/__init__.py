"""sagacity's benchmarks: `make bench` (or `python -m benchmarks [bench_name ...]`)."""
