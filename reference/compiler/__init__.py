"""The compiler. Its flag grammar, the driver that runs it on StableHLO text, and the
per-graph compiler-argument scope the seams read."""
