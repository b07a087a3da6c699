"""From an ATen FX graph to StableHLO text (torch-mlir), the decomposition table, the
NKI SDPA lowering, and the ops that have no lowering."""
