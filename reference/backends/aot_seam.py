"""The neuron backend under ``torch.compile(...).aot_compile``: a graph compiled to travel.

Dynamo's AOT compile calls the backend with AOT Autograd's bundled cache switched on and expects a
:class:`~reference.core.torch_compat.SerializableCallable` back. The backend then
(:func:`compile_serializable`) compiles the graph through its one door
(:func:`reference.backends.compile_entry.compile_fx_graph`) with a seam that serves each graph as the
``neuron`` seam does and keeps it, and hands back the graph as a
:class:`~reference.backends.serializable.NeuronSerializableCallable`.

Only a graph the backend serves whole under an inference plan can travel this way: one inference
graph (no gradients), not an SPMD program, actually compiled (not compile-only mode, not a fallback
to eager). Anything else is refused with :class:`~reference.backends.serializable.PrecompileError`
saying why.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Mapping

import torch

from reference.backends import device as _device
from reference.backends import inference_plan
from reference.backends.seam import Seam, serve_graph
from reference.backends.serializable import GraphRecord, NeuronSerializableCallable, PrecompileError
from reference.core.torch_compat import aot_compile_requested, aot_graph_names, functorch_config
from reference.pipeline import DEFAULT_KEY, CompiledGraph

__all__ = ["aot_compile_requested", "compile_serializable"]


class _Recorder:
    """The seam action of one ``aot_compile``: serve each graph as the neuron seam does, and keep
    what was served with its plan."""

    def __init__(self, n_inputs: int) -> None:
        self.n_inputs = n_inputs
        self.graphs: list[tuple[Any, Any, str]] = []  # (compiled graph, its plan or None, its type)

    def graph(self, aten_gm: torch.fx.GraphModule, *, graph_name: str, request, fx_passes_us: int = 0):
        compiled = serve_graph(aten_gm, graph_name=graph_name, request=request, fx_passes_us=fx_passes_us)
        graph_type = _graph_type()
        plan = inference_plan.plan_for(aten_gm, self.n_inputs, graph_type, compiled)
        self.graphs.append((compiled, plan, graph_type))
        return compiled


def _graph_type() -> str:
    """The type of the graph AOT Autograd hands over now (``inference``, ``forward``, ...)."""
    names = aot_graph_names()
    return (names[0].partition("_")[2] or "inference") if names else "inference"


def compile_serializable(
    gm: torch.fx.GraphModule, example_inputs: list, options: Mapping[str, Any] | None, compile_fx_graph: Callable
) -> NeuronSerializableCallable:
    """The neuron backend under ``aot_compile``: ``compile_fx_graph`` (the backend's one door)
    through a seam that serves like ``neuron`` and keeps the graph it served; raises
    :class:`PrecompileError` when that is not one planned, loaded inference graph."""
    recorder = _Recorder(len(example_inputs))
    seam = Seam("neuron", "serve", recorder.graph, key_policy=DEFAULT_KEY, graph_breaks=True, plans=False,
                no_plans_because="aot_compile keeps the plan it makes in the serialized graph")
    what = "the Dynamo graph"
    user_indices = tuple(_device.user_argument_indices(gm))
    # AOT compile asks AOT Autograd to bundle what the backend's compiler returns into its own cache
    # entry (Inductor's output code): off for this backend, whose graphs travel as themselves.
    with functorch_config().patch(bundled_autograd_cache=False, force_autograd_cache=False,
                                  strict_autograd_cache=False, bypass_autograd_cache_key=False):
        compile_fx_graph(gm, example_inputs, options, seam=seam)
    if not recorder.graphs:
        raise PrecompileError(what, "it was not compiled (a compile failure ran it eagerly, see the warning above)")
    if len(recorder.graphs) != 1:
        raise PrecompileError(what, f"AOT Autograd made {len(recorder.graphs)} graphs of it (a training graph?)")
    compiled, plan, graph_type = recorder.graphs[0]
    if not isinstance(compiled, CompiledGraph) or compiled.loaded is None:
        raise PrecompileError(what, "nothing was loaded (compile-only mode, TORCH_NEURONX_COMPILE_ONLY or reference.compile_only())")
    if plan is None:
        why = f"it is a {graph_type} graph (inputs that require grad under grad mode)" if graph_type != "inference" else (
            "its AOT Autograd wrapper does more than copy written inputs back (outputs that alias inputs, "
            "tensor subclasses, an SPMD program, ...)"
        )
        raise PrecompileError(what, why)
    built, lowering = compiled.built, compiled.lowering
    record = GraphRecord(
        graph_name=compiled.graph_name, key=built.key, artifact_sha256=hashlib.sha256(built.artifact).hexdigest(),
        artifact_size=len(built.artifact), input_specs=tuple(lowering.graph.input_specs),
        output_specs=tuple(lowering.graph.output_specs), mutated_inputs=tuple(plan.mutated_inputs),
        n_outputs=plan.n_outputs, static_inputs=tuple(plan.static_inputs), nones=tuple(compiled.nones),
        user_indices=user_indices, driver=getattr(compiled.loaded, "driver", "auto"), versions=dict(built.metadata.versions),
        compiler_args=tuple(built.metadata.compiler_args or ()),
    )
    return NeuronSerializableCallable(record, built.artifact, loaded=compiled.loaded)
