"""Tools that trace a model without serving it: lower its graphs, or build their artifacts.

The conformance adapter, the benchmarks and the SPMD tests use them. Every tool is a seam
(:class:`~reference.backends.seam.Seam`): it runs the model once under Dynamo through the same door
as ``backend="neuron"`` (the compile request, the FX passes, the graph breaks, AOT Autograd) and
hands each ATen graph to the pipeline's steps (:mod:`reference.pipeline`) instead of serving it.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping

import torch

from reference.backends.compile_entry import seam_backend
from reference.backends.seam import Seam
from reference.pipeline import BuildContext, Lowering, build, lower


def run_seam(
    model: Callable,
    args: tuple,
    seam: Seam,
    *,
    kwargs: dict | None = None,
    options: Mapping[str, Any] | None = None,
) -> None:
    """Run ``model(*args, **kwargs)`` once under Dynamo through ``seam`` (the one door,
    :func:`~reference.backends.compile_entry.compile_fx_graph`, with the seam's graph breaks), without
    gradients, from a clean Dynamo state and leaving one. The tools that trace without serving
    (lowering, building) use it."""
    torch.compiler.reset()
    try:
        with torch.no_grad():
            torch.compile(model, backend=seam_backend(seam, options), dynamic=False)(*args, **(kwargs or {}))
    finally:
        torch.compiler.reset()


def lowering_seam(collect: Callable[[str, Lowering], None]) -> Seam:
    """A seam that lowers each graph through the pipeline (its HLO cache, and an SPMD program for a
    graph with collectives) exactly as the serving seams do, hands ``collect(graph_name,
    lowering)`` the result and runs the graph eagerly: the adapter's ``lower()``."""

    def lower_only(aten_gm, *, graph_name, request, **_):
        collect(graph_name, lower(aten_gm, graph_name=graph_name, settings=request.settings))
        return aten_gm

    return Seam("lower", "lower", lower_only, graph_breaks=True, no_plans_because="it serves nothing")


def lower_graphs(model: Callable, args: tuple, options: Mapping[str, Any] | None = None, kwargs: dict | None = None) -> list:
    """Run Dynamo, the passes and lowering on ``model(*args)`` without compiling.

    Returns the :class:`~reference.lowering.stablehlo.LoweredGraph` of every graph (for a graph
    with collectives, its whole-program text), in the order Dynamo produced them; the model runs
    eagerly.
    """
    lowered: list = []
    run_seam(model, args, lowering_seam(lambda _name, lowering: lowered.append(lowering.graph)), kwargs=kwargs, options=options)
    return lowered


def lower_texts(model, args: tuple, kwargs: dict | None = None, options=None) -> list[str]:
    """The keyed text of every graph of ``model(*args, **kwargs)``: the whole-program text for a
    graph with collectives, the StableHLO module otherwise. Runs the model eagerly; compiles nothing."""
    return [g.hlo for g in lower_graphs(model, args, options=options, kwargs=kwargs)]


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

    def build_graph(aten_gm, *, graph_name, request, **_):
        t0 = time.perf_counter()
        lowering = lower(aten_gm, graph_name=graph_name, settings=request.settings)
        t1 = time.perf_counter()
        built = build(lowering, BuildContext.of(request, graph_name))
        timings["lower_s"] += t1 - t0
        timings["build_s"] += time.perf_counter() - t1
        keys[graph_name] = built.key
        specs = lowering.graph.output_specs

        def zeros(*_args):
            return [torch.zeros(s.shape, dtype=getattr(torch, s.dtype)) for s in specs]

        return zeros

    seam = Seam("build_only", "build", build_graph, graph_breaks=True, no_plans_because="it loads nothing")
    run_seam(model, args, seam, kwargs=kwargs, options=options)
    return keys
