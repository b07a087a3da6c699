"""Tools that trace a model without serving it: lower its graphs, or build their artifacts.

The conformance adapter, the benchmarks and the SPMD tests use them. Every tool runs the model once
under Dynamo with the seam's options, FX passes and graph breaks, and hands each ATen graph to the
pipeline's steps (:mod:`reference.pipeline`) instead of serving it.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping

import torch

from reference.backends import graph_breaks
from reference.backends.neuron import GraphHandler, compile_fx_graph
from reference.lowering.stablehlo import lower_to_stablehlo
from reference.pipeline import build, lower


def run_with_handler(
    model: Callable,
    args: tuple,
    handler: GraphHandler,
    *,
    seam: str,
    kwargs: dict | None = None,
    options: Mapping[str, Any] | None = None,
    force_graph_breaks: bool = False,
) -> None:
    """Run ``model(*args, **kwargs)`` once under Dynamo with ``handler`` in place of compiling
    each ATen graph (see :func:`compile_fx_graph`), without gradients, from a clean Dynamo state
    and leaving one. The tools that trace without serving (lowering, staging, building) use it;
    ``force_graph_breaks`` applies the backend's graph-break rules as ``backend="neuron"`` does."""

    def backend(gm, example_inputs, **_):
        return compile_fx_graph(gm, example_inputs, options, seam=seam, handler=handler)

    if force_graph_breaks:
        backend = graph_breaks.forces_graph_breaks(backend)

    torch.compiler.reset()
    try:
        with torch.no_grad():
            torch.compile(model, backend=backend, dynamic=False)(*args, **(kwargs or {}))
    finally:
        torch.compiler.reset()


def lower_graphs(model: Callable, args: tuple, options: Mapping[str, Any] | None = None) -> list:
    """Run Dynamo, the passes and lowering on ``model(*args)`` without compiling.

    Returns the :class:`~reference.lowering.stablehlo.LoweredGraph` of every graph, in the order
    Dynamo produced them; the model runs eagerly.
    """
    lowered: list = []

    def handler(aten_gm, *, graph_name, **_):
        lowered.append(lower_to_stablehlo(aten_gm, graph_name=graph_name))
        return aten_gm

    run_with_handler(model, args, handler, seam="lower", options=options, force_graph_breaks=True)
    return lowered


def lower_texts(model, args: tuple, kwargs: dict | None = None, options=None) -> list[str]:
    """The keyed text of every graph of ``model(*args, **kwargs)``: the whole-program text for a
    graph with collectives, the StableHLO module otherwise. Runs the model eagerly; compiles nothing."""
    texts: list[str] = []

    def handler(aten_gm, *, graph_name, **_):
        texts.append(lower(aten_gm, graph_name=graph_name).graph.hlo)
        return aten_gm

    run_with_handler(model, args, handler, seam="lower", kwargs=kwargs, options=options)
    return texts


def build_only(model, args: tuple, kwargs: dict | None = None, options=None, stats: dict | None = None) -> dict[str, str]:
    """Trace, lower and build (or fetch) the artifact of every graph of ``model(*args, **kwargs)``
    without running anything: no collective is executed, so one rank can build a multi-rank
    program alone. Returns ``{graph name: key}``. The call's outputs are zeros. ``stats``, when
    given, receives ``lower_s`` (splitting and lowering) and ``build_s`` (cache lookup, waiting on
    the key's lock, compiling)."""
    keys: dict[str, str] = {}
    timings = stats if stats is not None else {}
    timings.setdefault("lower_s", 0.0)
    timings.setdefault("build_s", 0.0)

    def handler(aten_gm, *, graph_name, compiler_args, **_):
        t0 = time.perf_counter()
        lowering = lower(aten_gm, graph_name=graph_name)
        t1 = time.perf_counter()
        built = build(lowering, compiler_args, graph_name=graph_name)
        timings["lower_s"] += t1 - t0
        timings["build_s"] += time.perf_counter() - t1
        keys[graph_name] = built.key
        specs = lowering.graph.output_specs

        def zeros(*_args):
            return [torch.zeros(s.shape, dtype=getattr(torch, s.dtype)) for s in specs]

        return zeros

    run_with_handler(model, args, handler, seam="build_only", kwargs=kwargs, options=options)
    return keys
