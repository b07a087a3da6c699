"""Benchmarks (``make bench``): each ``bench_*.py`` module has ``run(out_dir) -> dict`` and writes
``reports/bench/<name>.json``; figures are ratios against a peer measured in the same run."""
