"""The in-process compile seam: ``torch.compile(model, backend="neuron")``.

Registered under the names ``neuron`` and ``neuron_libtorch`` through the ``torch_dynamo_backends``
entry point, so ``torch.compile(..., backend="neuron")`` works without importing this package
first. What it declares is what differs from the other seams: it serves every ATen graph in-process
under the default key (:func:`reference.backends.seam.serve_graph`), with inference plans and the
backend's graph breaks (:mod:`reference.backends.graph_breaks`, hooked into Dynamo on first use and
acting only on frames traced for it; importing this module installs nothing). Everything else is
the one door every seam shares, :func:`reference.backends.compile_entry.compile_fx_graph`.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from reference.backends import aot_seam, graph_breaks, precompile
from reference.backends.compile_entry import compile_fx_graph
from reference.backends.seam import Seam, serve_graph
from reference.cache import plan_cache
from reference.core.diagnostics import warn_user
from reference.pipeline import DEFAULT_KEY

__all__ = ["NEURON_SEAM", "compile_fx_graph", "neuron_backend", "neuron_libtorch", "rebuild_precompiled"]


#: ``backend="neuron"``: serve every graph in-process under the default key, with inference plans.
NEURON_SEAM = Seam("neuron", "serve", serve_graph, key_policy=DEFAULT_KEY, graph_breaks=True, plans=True)


@graph_breaks.forces_graph_breaks
def neuron_backend(gm: torch.fx.GraphModule, example_inputs: list, options: Mapping[str, Any] | None = None, mode: str | None = None):
    """``backend="neuron"``: compile every graph in-process and run it."""
    if mode not in (None, "default"):
        warn_user(f"neuron backend: mode={mode!r} has no effect; compiling with the default mode")
    if aot_seam.aot_compile_requested():  # aot_compile: hand torch a graph it can save (SerializableCallable)
        return aot_seam.compile_serializable(gm, example_inputs, options, compile_fx_graph)
    if precompile.enabled():  # TORCH_CACHING_PRECOMPILE: hand PyTorch a rebuildable artifact
        precompile.record(gm, example_inputs, options, rebuild_precompiled, graph_digest=plan_cache.graph_digest(gm))
    return compile_fx_graph(gm, example_inputs, options, seam=NEURON_SEAM)


def rebuild_precompiled(gm: torch.fx.GraphModule, example_inputs: list, options: Mapping[str, Any] | None, **kwargs):
    """Compile a graph loaded from PyTorch's precompile cache again, through the neuron seam."""
    return compile_fx_graph(gm, example_inputs, options, seam=NEURON_SEAM, **kwargs)


@graph_breaks.forces_graph_breaks
def neuron_libtorch(gm: torch.fx.GraphModule, example_inputs: list, options: Mapping[str, Any] | None = None, mode: str | None = None):
    """``backend="neuron_libtorch"``: the same seam under its framework name."""
    return neuron_backend(gm, example_inputs, options=options, mode=mode)
