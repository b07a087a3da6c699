"""Load and serve: a built artifact as a callable, :func:`compile_aten_graph` (lower, key, build,
load) and :func:`serve` (its tail, also taken by a graph served from its plan)."""

from __future__ import annotations

import logging
import time
from typing import Callable, Sequence

import torch

from reference.cache.errors import UnloadableArtifactError
from reference.core.diagnostics import warn_user
from reference.core.errors import NEFFExecutionError, PrecisionError, PrecisionWarning
from reference.core.metrics import METRICS
from reference.core.specs import LoweredGraph
from reference.core.torch_compat import current_tracing_context
from reference.lowering.stablehlo import none_outputs, with_none_outputs
from reference.pipeline.building import build, neff_cache, record_graph_metrics
from reference.pipeline.context import BuildContext
from reference.pipeline.strategies import BuiltArtifact, Lowering, lower

log = logging.getLogger("reference.pipeline")  # the package's one logger (docs/logging.md)


def load(
    built: BuiltArtifact, lowering: Lowering, *, resident: Sequence[int] | None = None, driver: str = "auto"
) -> Callable:
    """The built artifact as a callable taking the graph's inputs and returning its outputs (the
    strategy's loader).
    ``resident``: the positions of parameters and buffers (default: AOT Autograd's static inputs
    of the graph being traced); ``driver``: the runtime driver setting (the request's
    ``runtime_driver``; ``"auto"`` picks by the call's size)."""
    return lowering.strategy.load(
        built, lowering, resident=static_input_indices() if resident is None else resident, driver=driver
    )


class CompiledGraph:
    """What a compiling seam hands back to AOT Autograd for one graph. ``hlo`` is the keyed text
    (the debug directory shows it); ``loaded`` is ``None`` in compile-only mode, where outputs
    come from the eager graph."""

    def __init__(
        self, built: BuiltArtifact, loaded: Callable | None, eager: Callable | None, *, hlo: str = "",
        lowering: Lowering | None = None, nones: Sequence[int] = (),
    ) -> None:
        self.built = built
        self.loaded = loaded
        self._eager = eager
        self.key = built.key
        self.graph_name = built.graph_name
        self.hlo = hlo
        self.lowering = lowering
        #: positions of the graph's ``None`` outputs, which the artifact does not return
        self.nones = tuple(nones)

    def __call__(self, *args: torch.Tensor):
        if self.loaded is None:
            METRICS.note_fallback(self.graph_name, "compile-only mode: the outputs come from the eager graph")
            return self._eager(*args)
        METRICS.bump("compiled_runs")  # execution evidence: the compiled path ran
        if self.nones:
            return with_none_outputs(self.loaded(*args), self.nones)
        return self.loaded(*args)


def static_input_indices() -> tuple[int, ...]:
    """Positions of the graph being compiled that hold parameters and buffers (AOT Autograd's
    static inputs), or none outside a trace. The runtime keeps their device buffers between calls;
    a position named here that is not a parameter costs a cached buffer, never a stale result."""
    tc = current_tracing_context()
    meta = getattr(tc, "fw_metadata", None) if tc is not None else None
    return tuple(getattr(meta, "static_input_indices", None) or ())


def compile_aten_graph(aten_gm: torch.fx.GraphModule, ctx: BuildContext) -> CompiledGraph:
    """Lower, key, build (or fetch) and load one ATen graph, recording its metrics once, under
    ``ctx`` (made from the compile request)."""
    lowering = lower(aten_gm, graph_name=ctx.graph_name, settings=ctx.settings)
    return serve(lowering, ctx, eager=aten_gm, nones=none_outputs(aten_gm))


def serve(
    lowering: Lowering, ctx: BuildContext, *, eager: Callable | None = None, resident: Sequence[int] | None = None,
    nones: Sequence[int] = (),
) -> CompiledGraph:
    """Build (or fetch) and load a lowered graph, recording its metrics once: the tail of
    :func:`compile_aten_graph`, also taken by a graph served from its plan (no ATen graph).
    ``nones``: the positions of the graph's ``None`` outputs, which the artifact does not return
    (:func:`~reference.lowering.stablehlo.none_outputs`). The float64 policy
    (:func:`float64_policy`) is applied before the build; with ``compile_only`` in the context's
    settings nothing is loaded (the outputs come from ``eager``)."""
    graph_name, settings = ctx.graph_name, ctx.settings
    float64_policy(lowering.graph, graph_name, settings.float64)
    start = time.perf_counter()
    built = build(lowering, ctx)
    log.info(
        "graph %s key %s: %s in %.2f s (lowering %.2f s)", graph_name, built.key[:12],
        "cache hit" if built.cache_hit else "compiled (cache miss)", time.perf_counter() - start, lowering.lower_us / 1e6,
    )
    record_graph_metrics(built, lowering, ctx)
    loaded = None
    if not settings.compile_only:
        built, loaded = _load_or_rebuild(built, lowering, ctx, resident)
    return CompiledGraph(built, loaded, eager, hlo=lowering.graph.hlo, lowering=lowering, nones=nones)


def float64_policy(lowered: LoweredGraph, graph_name: str, policy: str = "narrow") -> None:
    """The reference's float64 precision policy, applied to each graph it serves.

    The compiler computes float64 in float32 (IREE demotes f64 for the CPU, as Neuron's device
    has no float64 units): inputs are narrowed, outputs widened back, so a float64 output has
    float32's precision and range. For a graph with float64 inputs or outputs, by default
    (``NEURON_REFERENCE_FLOAT64=narrow``) that is done with one warning per graph naming them (by
    position); with ``=error`` the graph is refused with
    :class:`~reference.core.errors.PrecisionError` before it is built (``policy``: the request's
    ``float64`` setting). float64 only inside a
    graph with other inputs and outputs (a Python scalar the lowering keeps as an f64 constant, a
    backward graph's) is narrowed without a word: no dtype the user sees claims more than it holds.
    """
    inputs = [str(i) for i, s in enumerate(lowered.input_specs) if s.dtype == "float64"]
    outputs = [str(i) for i, s in enumerate(lowered.output_specs) if s.dtype == "float64"]
    if not inputs and not outputs:
        return
    what = "its float64 " + " and ".join(
        f"{kind} {', '.join(positions)}" for kind, positions in (("inputs", inputs), ("outputs", outputs)) if positions
    )
    if policy == "error":
        raise PrecisionError(
            f"{what} would be computed in float32 (the device has no float64 units), and "
            "NEURON_REFERENCE_FLOAT64=error refuses that; cast the inputs to float32, or unset "
            "NEURON_REFERENCE_FLOAT64 to compute in float32 with a warning",
            graph_name=graph_name,
        )
    warn_user(
        f"neuron backend: graph {graph_name!r}: {what} are computed in float32 (the device has no float64 "
        "units), so float64 results carry float32's precision and range (about 7 significant digits; "
        "beyond 3.4e38 they become inf). Set NEURON_REFERENCE_FLOAT64=error to refuse float64 graphs instead",
        PrecisionWarning,
    )


def _load_or_rebuild(
    built: BuiltArtifact, lowering: Lowering, ctx: BuildContext, resident: Sequence[int] | None
) -> tuple[BuiltArtifact, Callable]:
    """Load a built artifact. One served from the cache that the runtime cannot load although its
    checksums match (built for another runtime, or planted) is evicted and rebuilt once; when the
    rebuilt one cannot be loaded either, :class:`UnloadableArtifactError` names the entry."""
    driver = ctx.settings.runtime_driver
    try:
        return built, load(built, lowering, resident=resident, driver=driver)
    except NEFFExecutionError as exc:
        cache = neff_cache(ctx.settings.cache) if built.cache_hit else None
        if cache is None:
            raise
        first = exc
    entry = cache.entry_dir(built.key)
    with cache.lock(built.key, graph_name=ctx.graph_name):
        current = cache.get(built.key, evict=False)
        if current is None or current.artifact == built.artifact:  # not re-published meanwhile
            cache.evict(built.key, f"the runtime could not load its artifact ({first})")
    rebuilt = build(lowering, ctx)
    try:
        return rebuilt, load(rebuilt, lowering, resident=resident, driver=driver)
    except NEFFExecutionError as exc:
        raise UnloadableArtifactError(ctx.graph_name, entry, exc) from exc
