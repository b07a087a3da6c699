"""The in-process compile seam: ``torch.compile(model, backend="neuron")``.

Dynamo hands this seam an FX graph. :func:`compile_fx_graph`, the one door every seam
(:class:`~reference.backends.seam.Seam`) goes through, resolves the compile request once (scope
first, then the platform arguments, the environment, the model name and the rank), runs the FX pass
stage, and lowers through AOT Autograd; each ATen graph AOT Autograd produces goes to the seam
(for this one, :func:`reference.pipeline.compile_aten_graph`). docs/request_flow.md draws the whole
way a request travels, from ``torch.compile`` to the compiled graph.

Registered under the names ``neuron`` and ``neuron_libtorch`` through the
``torch_dynamo_backends`` entry point, so ``torch.compile(..., backend="neuron")`` works without
importing this package first.

The backend's graph breaks (:mod:`reference.backends.graph_breaks`) are hooked into Dynamo by the
backend on its first use (:func:`~reference.backends.graph_breaks.forces_graph_breaks`) and act only
on frames traced for it; importing this module installs nothing. Shapes are static: an
explicit ``dynamic=True`` (or a dynamic ``shapes_spec``) is rejected, and a graph that Dynamo made
dynamic on its own after a shape change is compiled once per concrete shape instead.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Mapping

import torch

from reference.cache import plan_cache
from reference.cache.hlo_cache import NO_PASSES, PASS_IDENTITY_META
from reference.backends import device as _device
from reference.backends import aot_seam, graph_breaks, inference_plan, precompile
from reference.backends.api import preflight
from reference.backends.debug_artifacts import DEBUG_ARTIFACTS
from reference.backends.seam import Seam, serve_graph
from reference.compiler.request import CompileRequest, resolve_request
from reference.core import env
from reference.core.diagnostics import ensure_default_handler, warn_user
from reference.core.errors import (
    BackendOptionError, DynamicShapeError, LoweringError, NEFFCompilationError, NeuronBackendError,
    TrainingUnsupportedError,
)
from reference.core.metrics import METRICS
from reference.core.torch_compat import (
    aot_autograd_backend, aot_module_simplified, current_tracing_context, dynamo_config, functorch_config, make_boxed_func,
)
from reference.fx_passes import PassContext, get_default_pass_manager
from reference.lowering import nki_sdpa
from reference.pipeline import DEFAULT_KEY, CompiledGraph, lower
from reference.spmd.errors import SPMDViolationError

log = logging.getLogger(__name__)

DEFAULT_TARGET_DEVICE = "cpu"

# option -> (accepted types, what a value looks like, what it does); the only keys the backend reads.
KNOWN_OPTIONS: dict[str, tuple[tuple[type, ...], str, str]] = {
    "compiler_args": ((list, tuple, str, type(None)), "a list of strings (or one string)", "the compiler flags"),
    "enable_fx_passes": ((bool,), "True or False", "whether the FX pass stage runs; default True"),
    "target_device": ((str,), "a string", "the device the FX passes move graph constants to; default 'cpu'"),
    "target": ((str,), "a string", "the target platform: trn2 or trn3"),
}


def normalize_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Validate ``torch.compile(options=...)``: a dict or None; known keys of the right type."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise BackendOptionError(f"options must be a dict or None, got {type(options).__name__}")
    out = dict(options)
    unknown = sorted(k for k in out if k not in KNOWN_OPTIONS)
    if unknown:
        warn_user(
            f"neuron backend: options {unknown} are not read by this backend and are ignored; "
            f"known options: {sorted(KNOWN_OPTIONS)}"
        )
    for k, (types, shape, meaning) in KNOWN_OPTIONS.items():
        if k in out and not isinstance(out[k], types):
            raise BackendOptionError(
                f"options[{k!r}] must be {shape} ({meaning}), got {type(out[k]).__name__} {out[k]!r}"
            )
    return out


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
            return _eager_fallback(exc, gm, fallback=not env.get(env.DISABLE_FALLBACK_EXECUTION))
    if _symbolic(example_inputs):
        _reject_explicit_dynamic()
        return _PerShape(gm, seam=seam, request=request)  # compiled per shape under this request
    user_indices = _device.user_argument_indices(gm)
    dynamo_name = f"{request.model_name}_dynamo"
    planned = seam.plans  # the seam serves under the default key: a graph may have a plan
    digest = (graph_digest or plan_cache.graph_digest(gm)) if planned else ""  # before the passes change it
    try:
        passed, fx_us, pass_identity = _fx_pass_stage(gm, request, dynamo_name)
    except SPMDViolationError:  # a guard rail under the strict flag: never a fallback (docs/spmd.md)
        raise
    except NeuronBackendError as exc:  # a pass that fails is a compile failure like any other
        return _eager_fallback(exc, gm, fallback=request.fallback)

    # A graph the seam serves under the default key may have an inference plan: then a warm start
    # skips AOT Autograd's trace, and every call its runtime wrapper (reference.backends.inference_plan).
    key = inference_plan.plan_key(digest, example_inputs, pass_identity, request.settings) if planned else None
    if key is not None:
        try:
            served = inference_plan.serve_planned(key, len(example_inputs), request, fx_passes_us=fx_us)
        except NeuronBackendError as exc:
            return _eager_fallback(exc, passed, fallback=request.fallback)
        if served is not None:
            call, compiled, plan = served
            _write_debug_artifacts(call.graph_name, plan.aten_code, compiled)
            run = torch.compiler.disable(_with_fallback(call, passed, fallback=request.fallback),
                                         reason="a compiled neuron graph")
            return _device.place(run, user_indices, graph_name=dynamo_name)

    compilers = _AtenCompilers(seam, request, len(example_inputs), (pass_identity, fx_us), key)
    try:
        compiled_fn = _aot(passed, example_inputs, compilers.forward, compilers.backward,
                           nki_sdpa.decompositions(request.settings.nki_sdpa))
    except NeuronBackendError as exc:
        return _eager_fallback(exc, passed, fallback=request.fallback)
    return _device.place(compilers.planned(passed, compiled_fn), user_indices, graph_name=dynamo_name)


def _fx_pass_stage(gm: torch.fx.GraphModule, request: CompileRequest, dynamo_name: str) -> tuple[torch.fx.GraphModule, int, str]:
    """The FX pass stage when the request enables it: the graph after the default pipeline, the
    stage's time (µs) and the pipeline's identity (the HLO cache keys on it); else ``gm`` as it is."""
    if not request.enable_fx_passes:
        return gm, 0, NO_PASSES
    start = time.perf_counter()
    manager = get_default_pass_manager()
    passed = manager.run_passes(gm, ctx=PassContext(
        graph_name=dynamo_name, target_device=request.target_device, spmd_strict=request.settings.spmd_strict,
    ))
    return passed, int((time.perf_counter() - start) * 1e6), manager.uuid()


class _AtenCompilers:
    """AOT Autograd's forward and backward compilers for one Dynamo graph under one request: each
    ATen graph gets its name and goes to the seam; a forward the seam could plan is remembered, so
    that a single inference graph runs without AOT Autograd's runtime wrapper (:meth:`planned`)."""

    def __init__(self, seam: Seam, request: CompileRequest, n_inputs: int, passes: tuple[str, int], plan_key: str | None):
        self.seam, self.request, self.n_inputs, self.plan_key = seam, request, n_inputs, plan_key
        self.pass_identity, self.fx_us = passes
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
        _write_debug_artifacts(graph_name, aten_gm.code, compiled)
        return _with_fallback(compiled, aten_gm, fallback=request.fallback)

    def backward(self, aten_gm: torch.fx.GraphModule, _aten_inputs: list):
        # Called while the forward compiles (see _aot): the backward graph is lowered now, so a
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
            _write_debug_artifacts(graph_name, aten_gm.code, compiled)
            return compiled

        return _BackwardGraph(build, aten_gm, graph_name, fallback=request.fallback)

    def planned(self, gm: torch.fx.GraphModule, compiled_fn: Callable) -> Callable:
        """``compiled_fn``, or, for one inference graph whose AOT wrapper would only copy mutated
        inputs back, that graph under its plan."""
        if len(self.made) != 1:
            return compiled_fn
        plan, compiled, graph_name = self.made[0]
        return torch.compiler.disable(
            _with_fallback(inference_plan.PlannedCall(compiled, plan, graph_name), gm, fallback=self.request.fallback),
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


def _aot(gm: torch.fx.GraphModule, example_inputs: list, fw_compiler: Callable, bw_compiler: Callable, decompositions) -> Callable:
    """AOT Autograd around ``fw_compiler`` (forward and inference graphs) and ``bw_compiler``
    (backward graphs), which AOT Autograd calls while the forward compiles rather than at the first
    ``backward()``: ``bw_compiler`` decides then whether the graph can be trained.

    This is what ``torch._dynamo.backends.common.aot_autograd`` does for flat inputs, called
    directly: that wrapper also turns on Inductor's AOT logging, and importing it imports Inductor's
    scheduler (0.25-0.5 s of every process's first compile, for a backend that never uses
    Inductor). Nested inputs (lists, tuples, dicts) still go through the wrapper, which flattens them.
    """
    def boxed_bw_compiler(*args, **kwargs):
        # neither the compile of a backward graph nor the callable it returns is traced by Dynamo
        run = torch.compiler.disable(bw_compiler, reason="the neuron backward compiler")(*args, **kwargs)
        return make_boxed_func(torch.compiler.disable(run, reason="a compiled neuron backward graph"))

    with functorch_config().patch(force_non_lazy_backward_lowering=True):
        if any(isinstance(x, (list, tuple, dict)) for x in example_inputs):
            return aot_autograd_backend(fw_compiler=fw_compiler, bw_compiler=boxed_bw_compiler, decompositions=decompositions)(
                gm, example_inputs
            )
        compiled = aot_module_simplified(
            gm, example_inputs, fw_compiler=fw_compiler, bw_compiler=boxed_bw_compiler, inference_compiler=fw_compiler,
            decompositions=decompositions,
        )
    return torch.compiler.disable(compiled, reason="a compiled neuron graph")


class _BackwardGraph:
    """A backward graph, lowered when its forward compiled, built and loaded at its first call.

    A failure to build or run it takes the fallback of every graph: re-raised (the default), or,
    with ``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0``, a warning and the graph run eagerly."""

    def __init__(self, build: Callable[[], Callable], aten_gm: torch.fx.GraphModule, graph_name: str, *, fallback: bool) -> None:
        self._build = build
        self._aten_gm = aten_gm
        self.graph_name = graph_name
        self._fallback = fallback
        self._run: Callable | None = None

    def __call__(self, *args):
        if self._run is None:
            try:
                self._run = _with_fallback(self._build(), self._aten_gm, fallback=self._fallback)
            except NeuronBackendError as exc:
                self._run = _eager_fallback(exc, self._aten_gm, fallback=self._fallback)
        return self._run(*args)


def _eager_fallback(exc: NeuronBackendError, gm: torch.fx.GraphModule, *, fallback: bool) -> Callable:
    """Re-raise (the default), or with ``fallback`` (``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0``
    when the request was made) warn and run the original graph eagerly."""
    if not fallback:
        raise exc
    warn_user(f"neuron backend: compilation failed, running the graph eagerly: {exc}")
    METRICS.note_fallback(getattr(exc, "graph_name", None) or "a Dynamo graph", f"compilation failed: {exc}")
    return gm.forward


def _write_debug_artifacts(graph_name: str, fx_code: str, compiled: Any) -> None:
    served = isinstance(compiled, CompiledGraph)  # a tool's handler may return something else
    try:
        DEBUG_ARTIFACTS.write(
            graph_name,
            fx_code=fx_code,
            hlo=compiled.hlo if served else None,
            artifact=compiled.built.artifact if served else None,
        )
    except (OSError, NeuronBackendError) as exc:  # checked before compiling; a late failure only warns
        log.warning("neuron backend: could not write debug artifacts of %s: %s", graph_name, exc)


def _is_symbolic(x: Any) -> bool:
    if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    if isinstance(x, torch.Tensor):
        return any(isinstance(s, torch.SymInt) for s in x.shape)
    return False


def _symbolic(example_inputs: list) -> bool:
    return any(_is_symbolic(x) for x in example_inputs)


def _reject_explicit_dynamic() -> None:
    """``dynamic=True`` and dynamic ``shapes_spec`` ask for one artifact over many shapes, which the
    backend cannot build; automatic dynamism (a shape changed between calls) is handled per shape."""
    cfg = dynamo_config()
    if cfg.assume_static_by_default is False:
        raise DynamicShapeError(
            "torch.compile(dynamic=True) is not supported by the neuron backend: it compiles static "
            "shapes only. Use dynamic=False (or leave it unset): each new input shape then compiles "
            "its own graph."
        )
    if getattr(cfg, "_shapes_spec", None) is not None:
        raise DynamicShapeError(
            "a dynamic shapes_spec is not supported by the neuron backend, for the same reason as "
            "dynamic=True: it compiles static shapes only. Use a static spec or none."
        )


def _specialize(gm: torch.fx.GraphModule, args: tuple) -> tuple[torch.fx.GraphModule, list[int]]:
    """A copy of ``gm`` with its integer (size) inputs replaced by the values in ``args``."""
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    keep: list[int] = []
    for i, node in enumerate(list(graph.find_nodes(op="placeholder"))):
        value = args[i]
        if isinstance(value, torch.Tensor):
            keep.append(i)
            continue
        for user in list(node.users):
            user.args = torch.fx.node.map_arg(user.args, lambda n, _p=node, _v=value: _v if n is _p else n)
            user.kwargs = torch.fx.node.map_arg(user.kwargs, lambda n, _p=node, _v=value: _v if n is _p else n)
        graph.erase_node(node)
    graph.lint()
    return torch.fx.GraphModule(gm, graph), keep


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
            sgm, keep = _specialize(self._gm, args)
            fn = compile_fx_graph(sgm, [args[i] for i in keep], None, seam=self._seam, request=self._request)
            entry = self._compiled[key] = (fn, keep)
        fn, keep = entry
        return fn(*[args[i] for i in keep])


def _with_fallback(compiled, aten_gm, *, fallback: bool):
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

