"""The in-process compile seam: ``torch.compile(model, backend="neuron")``.

Dynamo hands this seam an FX graph. The seam resolves the options (scope first, then the platform
arguments), runs the FX pass stage, and lowers through AOT Autograd; each ATen graph AOT Autograd
produces goes through :func:`reference.compile.pipeline.compile_aten_graph`.

Registered under the names ``neuron`` and ``neuron_libtorch`` through the
``torch_dynamo_backends`` entry point, so ``torch.compile(..., backend="neuron")`` works without
importing this package first.
"""

from __future__ import annotations

import logging
import time
import warnings
from typing import Any, Callable, Mapping

import torch
from torch._dynamo.backends.common import aot_autograd

from reference.compile import env
from reference.compile.compiler_args import apply_platform_compiler_args, apply_scoped_compiler_args
from reference.compile.config import get_model_name
from reference.compile.errors import BackendOptionError, NeuronBackendError
from reference.compile.lowering import decomposition_table
from reference.compile.metrics import METRICS
from reference.compile.pipeline import compile_aten_graph

log = logging.getLogger(__name__)

DEFAULT_TARGET_DEVICE = "cpu"

# option -> (accepted types, description); the only keys the backend reads.
KNOWN_OPTIONS: dict[str, tuple[tuple[type, ...], str]] = {
    "compiler_args": ((list, tuple, str, type(None)), "list of compiler flags"),
    "enable_fx_passes": ((bool,), "run the FX pass stage (default True)"),
    "target_device": ((str,), "device the FX passes move graph constants to (default 'cpu')"),
    "target": ((str,), "target platform, trn2 or trn3"),
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
        warnings.warn(
            f"neuron backend: options {unknown} are not read by this backend and are ignored; "
            f"known options: {sorted(KNOWN_OPTIONS)}",
            stacklevel=3,
        )
    for k, (types, what) in KNOWN_OPTIONS.items():
        if k in out and not isinstance(out[k], types):
            raise BackendOptionError(f"options[{k!r}] must be a {what}, got {type(out[k]).__name__}")
    return out


def _aot_names() -> tuple[str, str]:
    tc = torch._guards.TracingContext.try_get()
    names = getattr(tc, "aot_graph_name", None) if tc is not None else None
    if names:
        aot_id, _, graph_type = names[0].partition("_")
        return aot_id, graph_type or "inference"
    return "0", "inference"


GraphHandler = Callable[..., Callable]


def compile_fx_graph(
    gm: torch.fx.GraphModule,
    example_inputs: list,
    options: Mapping[str, Any] | None,
    *,
    seam: str,
    handler: GraphHandler | None = None,
) -> Any:
    """Shared body of the seams; returns the callable Dynamo runs.

    ``handler(aten_gm, graph_name=, compiler_args=, model_name=, fx_passes_us=)`` does the
    per-graph work and returns the graph's callable; the default compiles and loads it.
    """
    handler = handler or compile_aten_graph
    options = normalize_options(options)
    options = apply_scoped_compiler_args(options)
    options = apply_platform_compiler_args(options)
    compiler_args = list(options["compiler_args"])
    model_name = get_model_name()

    fx_us = 0
    if options.get("enable_fx_passes", True):
        from reference.fx_passes import get_default_pass_manager

        start = time.perf_counter()
        gm = get_default_pass_manager().run_passes(
            gm, target_device=options.get("target_device", DEFAULT_TARGET_DEVICE), graph_name=f"{model_name}_dynamo"
        )
        fx_us = int((time.perf_counter() - start) * 1e6)

    def fw_compiler(aten_gm: torch.fx.GraphModule, _aten_inputs: list):
        aot_id, graph_type = _aot_names()
        nth = METRICS.next_graph_index(model_name, aot_id, graph_type)
        graph_name = f"{model_name}_{aot_id}_{graph_type}_{nth}"
        compiled = handler(
            aten_gm, graph_name=graph_name, compiler_args=compiler_args, model_name=model_name, fx_passes_us=fx_us
        )
        return _with_fallback(compiled, aten_gm)

    aot = aot_autograd(fw_compiler=fw_compiler, bw_compiler=fw_compiler, decompositions=decomposition_table())
    try:
        return aot(gm, example_inputs)
    except NeuronBackendError as exc:
        if env.get(env.DISABLE_FALLBACK_EXECUTION):
            raise
        warnings.warn(f"neuron backend: compilation failed, running the graph eagerly: {exc}", stacklevel=2)
        return gm.forward


def _with_fallback(compiled, aten_gm):
    if env.get(env.DISABLE_FALLBACK_EXECUTION):
        return compiled

    def run(*args):
        try:
            return compiled(*args)
        except NeuronBackendError as exc:
            warnings.warn(f"neuron backend: execution failed, running the graph eagerly: {exc}", stacklevel=2)
            return aten_gm(*args)

    return run


def neuron_backend(gm: torch.fx.GraphModule, example_inputs: list, options: Mapping[str, Any] | None = None, mode: str | None = None):
    """``backend="neuron"``: compile every graph in-process and run it."""
    if mode not in (None, "default"):
        warnings.warn(f"neuron backend: mode={mode!r} has no effect; compiling with the default mode", stacklevel=2)
    from reference.cache import precompile

    if precompile.enabled():  # TORCH_CACHING_PRECOMPILE: hand PyTorch a rebuildable artifact
        precompile.record(gm, example_inputs, options)
    return compile_fx_graph(gm, example_inputs, options, seam="neuron_libtorch")


def neuron_libtorch(gm: torch.fx.GraphModule, example_inputs: list, options: Mapping[str, Any] | None = None, mode: str | None = None):
    """``backend="neuron_libtorch"``: the same seam under its framework name."""
    return neuron_backend(gm, example_inputs, options=options, mode=mode)


def lower_graphs(model: Callable, args: tuple, options: Mapping[str, Any] | None = None) -> list:
    """Run Dynamo, the passes and lowering on ``model(*args)`` without compiling.

    Returns the :class:`~reference.compile.lowering.LoweredGraph` of every graph, in the order
    Dynamo produced them; the model runs eagerly.
    """
    from reference.compile.lowering import lower_to_stablehlo

    lowered: list = []

    def handler(aten_gm, *, graph_name, **_):
        lowered.append(lower_to_stablehlo(aten_gm, graph_name=graph_name))
        return aten_gm

    def backend(gm, example_inputs, **_):
        return compile_fx_graph(gm, example_inputs, options, seam="lower", handler=handler)

    torch._dynamo.reset()
    try:
        with torch.no_grad():
            torch.compile(model, backend=backend, dynamic=False)(*args)
    finally:
        torch._dynamo.reset()
    return lowered
