"""What a compile or execution failure turns into: re-raised (the default), or, with
``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0`` when the request was made, a warning, a fallback
recorded in the metrics, and the graph run eagerly."""

from __future__ import annotations

from typing import Callable

import torch

from reference.core.diagnostics import warn_user
from reference.core.errors import NeuronBackendError
from reference.core.metrics import METRICS


def eager_fallback(exc: NeuronBackendError, gm: torch.fx.GraphModule, *, fallback: bool) -> Callable:
    """Re-raise (the default), or with ``fallback`` (``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0``
    when the request was made) warn and run the original graph eagerly."""
    if not fallback:
        raise exc
    warn_user(f"neuron backend: compilation failed, running the graph eagerly: {exc}")
    METRICS.note_fallback(getattr(exc, "graph_name", None) or "a Dynamo graph", f"compilation failed: {exc}")
    return gm.forward



def with_fallback(compiled, aten_gm, *, fallback: bool):
    """``compiled``, or with ``fallback`` a wrapper that runs ``aten_gm`` eagerly when a call fails."""
    if not fallback:
        return compiled

    def run(*args):
        try:
            return compiled(*args)
        except NeuronBackendError as exc:
            warn_user(f"neuron backend: execution failed, running the graph eagerly: {exc}")
            METRICS.note_fallback(getattr(compiled, "graph_name", None) or "a graph", f"execution failed: {exc}")
            return aten_gm(*args)

    return run
