"""The one door into the pipeline: a Dynamo graph through the FX passes and AOT Autograd to the
ATen graphs a seam compiles.

:func:`compile_fx_graph` is every seam's body (:class:`~reference.backends.seam.Seam`: the neuron,
capture and native backends, the runner's tools and ATOM's reference pieces). It resolves the
compile request once (scope first, then the platform arguments, the environment, the model name
and the rank), runs the FX pass stage, and traces the graph with AOT Autograd
(:mod:`reference.backends.aot_autograd`); each ATen graph goes to the seam (serve, stage, lower or
build). A graph served under the default key may have an inference plan, so a warm start skips
AOT Autograd's trace (:mod:`reference.backends.inference_plan`). docs/request_flow.md draws the
whole way.

Shapes are static (:mod:`reference.backends.static_shapes`): an explicit ``dynamic=True`` is
rejected, and a graph that Dynamo made dynamic on its own is compiled once per concrete shape.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Mapping, NamedTuple

import torch

from reference.backends import aot_autograd
from reference.backends import device as _device
from reference.backends import graph_breaks, inference_plan
from reference.backends.aot_autograd import BackwardGraph
from reference.backends.api import preflight
from reference.backends.debug_artifacts import DEBUG_ARTIFACTS
from reference.backends.fallback import eager_fallback, with_fallback
from reference.backends.seam import Seam
from reference.backends.static_shapes import any_symbolic, reject_explicit_dynamic, specialize
from reference.cache import plan_cache
from reference.cache.hlo_cache import NO_PASSES, PASS_IDENTITY_META
from reference.compiler.options import normalize_options
from reference.compiler.request import CompileRequest, resolve_request
from reference.core import env
from reference.core.diagnostics import ensure_default_handler
from reference.core.errors import LoweringError, NEFFCompilationError, NeuronBackendError, TrainingUnsupportedError
from reference.core.metrics import METRICS
from reference.core.torch_compat import current_tracing_context
from reference.fx_passes import PassContext, get_default_pass_manager
from reference.lowering import nki_sdpa
from reference.pipeline import CompiledGraph, lower
from reference.spmd.errors import SPMDViolationError

log = logging.getLogger(__name__)


class FxStage(NamedTuple):
    """What the FX pass stage gives the rest: the graph after it, its time (µs, the graph's
    ``torch_neuronx_fx_passes_us``) and the pipeline's identity (the HLO cache keys on it)."""

    graph: torch.fx.GraphModule
    us: int
    identity: str


def _aot_names() -> tuple[str, str]:
    tc = current_tracing_context()
    names = getattr(tc, "aot_graph_name", None) if tc is not None else None
    if names:
        aot_id, _, graph_type = names[0].partition("_")
        return aot_id, graph_type or "inference"
    return "0", "inference"


def _next_graph_name(model_name: str) -> tuple[str, str]:
    """The name of the ATen graph AOT Autograd hands over now (``<model>_<aot id>_<type>_<n>``, the
    n-th of its kind, counted in the metrics) and its type (``inference``, ``forward``, ...)."""
    aot_id, graph_type = _aot_names()
    nth = METRICS.next_graph_index(model_name, aot_id, graph_type)
    return f"{model_name}_{aot_id}_{graph_type}_{nth}", graph_type


def compile_fx_graph(
    gm: torch.fx.GraphModule,
    example_inputs: list,
    options: Mapping[str, Any] | None,
    *,
    seam: Seam,
    graph_digest: str | None = None,
    request: CompileRequest | None = None,
) -> Any:
    """The one door into the pipeline: every seam's body; returns the callable Dynamo runs.

    Resolves the compile request (:func:`~reference.compiler.request.resolve_request`: scope,
    platform arguments, environment, model name, rank) unless one is given, runs the FX pass stage
    and AOT Autograd, and hands each ATen graph to ``seam.graph`` (serve, stage, lower or build).
    ``graph_digest``: the :func:`~reference.cache.plan_cache.graph_digest` of the graph as Dynamo
    made it, when ``gm`` is a copy that no longer shows it (the precompile cache's rebuild).
    """
    preflight()
    ensure_default_handler()
    if request is None:
        options = normalize_options(options)
        try:
            request = resolve_request(options, seam=seam.name, key_policy=seam.key_policy_now(),
                                      thresholds=_thresholds())
        except NEFFCompilationError as exc:  # a compiler argument the compiler rejects: a compile failure
            return eager_fallback(exc, gm, fallback=not env.get(env.DISABLE_FALLBACK_EXECUTION))
    if any_symbolic(example_inputs):
        reject_explicit_dynamic()
        return _PerShape(gm, seam=seam, request=request)  # compiled per shape under this request
    user_indices = _device.user_argument_indices(gm)
    dynamo_name = f"{request.model_name}_dynamo"
    planned = seam.plans  # the seam serves under the default key: a graph may have a plan
    digest = (graph_digest or plan_cache.graph_digest(gm)) if planned else ""  # before the passes change it
    try:
        stage = _fx_pass_stage(gm, request, dynamo_name)
    except SPMDViolationError:  # a guard rail under the strict flag: never a fallback (docs/spmd.md)
        raise
    except NeuronBackendError as exc:  # a pass that fails is a compile failure like any other
        return eager_fallback(exc, gm, fallback=request.fallback)

    # A graph the seam serves under the default key may have an inference plan: then a warm start
    # skips AOT Autograd's trace, and every call its runtime wrapper (reference.backends.inference_plan).
    key = inference_plan.plan_key(digest, example_inputs, stage.identity, request.settings) if planned else None
    if key is not None:
        try:
            served = inference_plan.serve_planned(key, len(example_inputs), request, fx_passes_us=stage.us)
        except NeuronBackendError as exc:
            return eager_fallback(exc, stage.graph, fallback=request.fallback)
        if served is not None:
            call, compiled, plan = served
            write_graph_artifacts(call.graph_name, plan.aten_code, compiled)
            run = torch.compiler.disable(with_fallback(call, stage.graph, fallback=request.fallback),
                                         reason="a compiled neuron graph")
            return _device.place(run, user_indices, graph_name=dynamo_name)

    compilers = _AtenCompilers(seam, request, len(example_inputs), stage, key)
    try:
        compiled_fn = aot_autograd.trace_aten_graphs(stage.graph, example_inputs, compilers.forward, compilers.backward,
                           nki_sdpa.decompositions(request.settings.nki_sdpa))
    except NeuronBackendError as exc:
        return eager_fallback(exc, stage.graph, fallback=request.fallback)
    return _device.place(compilers.planned(stage.graph, compiled_fn), user_indices, graph_name=dynamo_name)


def _fx_pass_stage(gm: torch.fx.GraphModule, request: CompileRequest, dynamo_name: str) -> FxStage:
    """The FX pass stage when the request enables it (the default pipeline); else ``gm`` as it is."""
    if not request.enable_fx_passes:
        return FxStage(gm, 0, NO_PASSES)
    start = time.perf_counter()
    manager = get_default_pass_manager()
    passed = manager.run_passes(gm, ctx=PassContext(
        graph_name=dynamo_name, target_device=request.target_device, spmd_strict=request.settings.spmd_strict,
    ))
    return FxStage(passed, int((time.perf_counter() - start) * 1e6), manager.uuid())


class _AtenCompilers:
    """AOT Autograd's forward and backward compilers for one Dynamo graph under one request: each
    ATen graph gets its name and goes to the seam; a forward the seam could plan is remembered, so
    that a single inference graph runs without AOT Autograd's runtime wrapper (:meth:`planned`)."""

    def __init__(self, seam: Seam, request: CompileRequest, n_inputs: int, stage: FxStage, plan_key: str | None):
        self.seam, self.request, self.n_inputs, self.plan_key = seam, request, n_inputs, plan_key
        self.pass_identity, self.fx_us = stage.identity, stage.us
        self.made: list = []  # (plan, compiled graph, name) of each graph that needs no AOT runtime wrapper

    def forward(self, aten_gm: torch.fx.GraphModule, _aten_inputs: list):
        request = self.request
        graph_name, graph_type = _next_graph_name(request.model_name)
        aten_gm.meta[PASS_IDENTITY_META] = self.pass_identity  # the HLO cache keys on the pipeline that ran
        compiled = self.seam.graph(aten_gm, graph_name=graph_name, request=request, fx_passes_us=self.fx_us)
        plan = inference_plan.plan_for(aten_gm, self.n_inputs, graph_type, compiled) if self.seam.plans else None
        if plan is not None:
            self.made.append((plan, compiled, graph_name))
            if self.plan_key is not None:
                inference_plan.record(self.plan_key, plan, request.settings.cache)
        write_graph_artifacts(graph_name, aten_gm.code, compiled)
        return with_fallback(compiled, aten_gm, fallback=request.fallback)

    def backward(self, aten_gm: torch.fx.GraphModule, _aten_inputs: list):
        # Called while the forward compiles (see aot_autograd.trace_aten_graphs): the backward graph is lowered now, so a
        # graph that cannot be trained is refused with its forward (and falls back with it); it is
        # built and loaded at its first backward(), so a forward under grad mode that never
        # calls backward() (evaluation without no_grad) pays for a lowering, not a compile.
        request, seam, fx_us = self.request, self.seam, self.fx_us
        graph_name, _ = _next_graph_name(request.model_name)
        aten_gm.meta[PASS_IDENTITY_META] = self.pass_identity
        try:
            lower(aten_gm, graph_name=graph_name, settings=request.settings)  # the first backward() finds it in the HLO cache
        except LoweringError as exc:
            raise TrainingUnsupportedError(exc) from exc

        def build():
            compiled = seam.graph(aten_gm, graph_name=graph_name, request=request, fx_passes_us=fx_us)
            write_graph_artifacts(graph_name, aten_gm.code, compiled)
            return compiled

        return BackwardGraph(build, aten_gm, graph_name, fallback=request.fallback)

    def planned(self, gm: torch.fx.GraphModule, compiled_fn: Callable) -> Callable:
        """``compiled_fn``, or, for one inference graph whose AOT wrapper would only copy mutated
        inputs back, that graph under its plan."""
        if len(self.made) != 1:
            return compiled_fn
        plan, compiled, graph_name = self.made[0]
        return torch.compiler.disable(
            with_fallback(inference_plan.PlannedCall(compiled, plan, graph_name), gm, fallback=self.request.fallback),
            reason="a compiled neuron graph",
        )


def _thresholds() -> dict[str, int]:
    return {name: graph_breaks.THRESHOLDS.get(name) for name in graph_breaks.DEFAULT_THRESHOLDS}


def opt_into_graph_breaks(backend: Callable) -> Callable:
    """Mark a Dynamo backend function as one that takes the backend's forced graph breaks."""
    return graph_breaks.forces_graph_breaks(backend)


def seam_backend(seam: Seam, options: Mapping[str, Any] | None = None) -> Callable:
    """A Dynamo backend function for ``seam`` (``torch.compile(model, backend=...)``), opted into
    the forced graph breaks when the seam is."""

    def backend(gm, example_inputs, **_):
        return compile_fx_graph(gm, example_inputs, options, seam=seam)

    return opt_into_graph_breaks(backend) if seam.graph_breaks else backend


class _PerShape:
    """Compiles a graph Dynamo traced with symbolic sizes once per concrete set of input shapes,
    each under the request resolved when Dynamo handed the graph over (not the scope or the
    environment of the call that brings a new shape)."""

    def __init__(self, gm, *, seam: Seam, request: CompileRequest) -> None:
        self._gm = gm
        self._seam = seam
        self._request = request
        self._compiled: dict[tuple, tuple[Callable, list[int]]] = {}

    def __call__(self, *args):
        key = tuple(
            (tuple(a.shape), tuple(a.stride()), a.dtype) if isinstance(a, torch.Tensor) else (type(a).__name__, a)
            for a in args
        )
        entry = self._compiled.get(key)
        if entry is None:
            sgm, keep = specialize(self._gm, args)
            fn = compile_fx_graph(sgm, [args[i] for i in keep], None, seam=self._seam, request=self._request)
            entry = self._compiled[key] = (fn, keep)
        fn, keep = entry
        return fn(*[args[i] for i in keep])


def write_graph_artifacts(graph_name: str, fx_code: str, compiled: Any) -> None:
    """Leave one compiled graph's FX code, StableHLO and artifact in the debug directory; a failure
    here only warns (the directory was checked before compiling)."""
    served = isinstance(compiled, CompiledGraph)  # a tool's handler may return something else
    try:
        DEBUG_ARTIFACTS.write(
            graph_name,
            fx_code=fx_code,
            hlo=compiled.hlo if served else None,
            artifact=compiled.built.artifact if served else None,
        )
    except (OSError, NeuronBackendError) as exc:
        log.warning("neuron backend: could not write debug artifacts of %s: %s", graph_name, exc)
