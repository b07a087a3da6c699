"""ATOM-style compilation and graph capture on top of the reference pipeline.

Two halves share this package. Compilation: levels and configuration, the compile decorator, custom
ops, piecewise splitting, the compiler adaptors (Inductor and the reference's own pipeline) and the
compiler manager with its on-disk map. Graph capture: graph modes, the forward context, token and
request graphs.

Importing this package does no work: no tracing, no op registration, no patching; Inductor and
Dynamo internals are imported where they are first used.
"""

from reference.atom.graph_mode import CUDAGraphMode

__all__ = [
    "CUDAGraphMode",
]

# --- graph capture: names added by the graph-capture half below this line ---------------------
