"""The reference compiler's level-3 piece: one artifact per concrete size, and a thin call.

A piece is called on every step, several times per step (one per layer and then some), so what a
call costs beside the arithmetic decides what level 3 with the reference pieces costs against
eager. Going through the neuron seam as a ``torch.compile`` backend costs a Dynamo frame (guards)
for a size in ``compile_sizes``, or the seam's per-shape lookup for any other size, then the
seam's wrappers (AOT Autograd's runtime wrapper, device placement, the fallback wrapper) and a
runtime call that imports every weight again. :class:`ReferencePiece` keeps the seam for the
compile and drops the rest from the call:

- the piece graph is specialised to the sizes of the call (its size arguments become constants)
  and compiled once per set of sizes through the seam's own compile path
  (:func:`reference.backends.compile_entry.compile_fx_graph`: option scopes, FX passes, AOT Autograd, the
  HLO and NEFF caches), inside a tracing context of its own so that AOT Autograd's metadata tells
  which inputs the graph writes;
- the piece's weights (parameters, and the tensors Dynamo marked static: module buffers) are
  **resident** inputs of the loaded artifact: their device buffers are made once and reused while
  the same tensor comes back at the same address (:mod:`reference.runtime`);
- a call looks the entry up by the piece's size arguments, hands the tensors to the compiled
  graph, and copies the new values of any input the graph writes back into the caller's tensor.

A graph AOT Autograd does more for than that copy (a training graph, an output aliasing an input,
duplicated inputs) keeps the seam's general callable for that size; so does a call that fails in
the runtime (which then raises, or falls back to eager, as the seam's setting says).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional, Sequence

import torch
import torch.fx as fx

from reference.core.errors import NeuronBackendError
from reference.core.torch_compat import aot_graph_names, tracing_of_its_own

__all__ = ["ReferencePiece"]


def _is_weight(t: torch.Tensor) -> bool:
    """A parameter, or a tensor Dynamo marked as having a static address (module buffers)."""
    return isinstance(t, torch.nn.Parameter) or getattr(t, "_dynamo_static_input_type", None) is not None


def _with_tuple_output(graph: fx.GraphModule) -> tuple[fx.GraphModule, bool]:
    """``graph`` returning a tuple, as a Dynamo backend's graph does (a piece cut from a graph
    returns a bare value when it has one output); the flag says whether it was wrapped."""
    output = next(iter(reversed(graph.graph.nodes)))
    if isinstance(output.args[0], (tuple, list)):
        return graph, False
    copied = fx.Graph()
    value = copied.graph_copy(graph.graph, {})
    copied.output((value,))
    return fx.GraphModule(graph, copied), True


def _specialize(gm: fx.GraphModule, args: Sequence[Any]) -> fx.GraphModule:
    """A copy of ``gm`` whose non-tensor inputs are the constants in ``args``; it takes the tensors only."""
    graph = fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    for i, node in enumerate(list(graph.find_nodes(op="placeholder"))):
        if isinstance(args[i], torch.Tensor):
            continue
        value = args[i]
        for user in list(node.users):
            user.args = fx.node.map_arg(user.args, lambda n, _p=node, _v=value: _v if n is _p else n)
            user.kwargs = fx.node.map_arg(user.kwargs, lambda n, _p=node, _v=value: _v if n is _p else n)
        graph.erase_node(node)
    graph.lint()
    return fx.GraphModule(gm, graph)


class _Thin:
    """One size's compiled graph, called with the piece's tensors; writes back what it mutates."""

    __slots__ = ("compiled", "mutated", "n_mutated", "general")

    def __init__(self, compiled: Callable, mutated: Sequence[int], general: Callable) -> None:
        self.compiled = compiled
        self.mutated = tuple(mutated)
        self.n_mutated = len(self.mutated)
        self.general = general

    def __call__(self, tensors: list) -> Any:
        try:
            outs = self.compiled(*tensors)
        except NeuronBackendError:
            # The seam's general callable runs it again and raises, or falls back to eager, as the
            # fallback setting says.
            return self.general(*tensors)
        n = self.n_mutated
        if not n:
            return outs
        with torch.no_grad():
            for i, new in zip(self.mutated, outs):
                tensors[i].detach().copy_(new)
        return outs[n:]


class _General:
    """A size whose graph needs AOT Autograd's runtime wrapper: the seam's callable as it is."""

    __slots__ = ("general",)

    def __init__(self, general: Callable) -> None:
        self.general = general

    def __call__(self, tensors: list) -> Any:
        return self.general(*tensors)


class ReferencePiece:
    """A piece compiled by the reference backend: an artifact per set of size arguments (built on
    the first call with them, or by :meth:`build` ahead), called through :class:`_Thin`.

    ``compiler_args``: the compiler flags the piece keeps, for every size it builds (``None``: the
    base arguments; a scope open when a size is built does not replace them). The size arguments are the piece's non-tensor inputs (Dynamo passes the
    symbolic batch size as one); the key of an entry is their values or, when a tensor's size is
    not given by them, every argument (the tensors' shapes and dtypes).
    """

    def __init__(self, graph: fx.GraphModule, compiler_args: Optional[Sequence[str]], example_inputs: Sequence[Any]) -> None:
        self.graph, self.single = _with_tuple_output(graph)
        self.compiler_args = None if compiler_args is None else list(compiler_args)
        self.options: dict[str, Any] = {} if compiler_args is None else {"compiler_args": list(compiler_args)}
        self.size_positions = tuple(i for i, x in enumerate(example_inputs) if not isinstance(x, torch.Tensor))
        self.tensor_positions = tuple(i for i, x in enumerate(example_inputs) if isinstance(x, torch.Tensor))
        self.by_sizes = _sizes_determine_shapes(self.graph, example_inputs)
        self.entries: dict[tuple, Callable[[list], Any]] = {}
        self._lock = threading.Lock()

    def key(self, args: Sequence[Any]) -> tuple:
        if self.by_sizes:
            return tuple([args[i] for i in self.size_positions])
        return tuple([(a.shape, a.dtype) if isinstance(a, torch.Tensor) else a for a in args])

    def __call__(self, *args: Any) -> Any:
        entry = self.entries.get(self.key(args))
        if entry is None:
            entry = self.build(args)
        out = entry([args[i] for i in self.tensor_positions])
        return out[0] if self.single else out

    def build(self, args: Sequence[Any]) -> Callable[[list], Any]:
        """The entry for the sizes of ``args`` (real tensors and ints), compiled now if new."""
        key = self.key(args)
        with self._lock:
            entry = self.entries.get(key)
            if entry is None:
                entry = self.entries[key] = self._compile(args)
        return entry

    def _compile(self, args: Sequence[Any]) -> Callable[[list], Any]:
        # the seam and the pipeline sit on lower floors; imported here to keep importing this cheap
        from reference.backends.compile_entry import compile_fx_graph
        from reference.backends.seam import Seam
        from reference.compiler.scope import scoped_compiler_args
        from reference.backends.inference_plan import plan_for
        from reference.lowering.stablehlo import none_outputs
        from reference.pipeline import BuildContext, lower, serve

        tensors = [args[i] for i in self.tensor_positions]
        resident = tuple(j for j, t in enumerate(tensors) if _is_weight(t))
        made: list = []

        def serve_piece(aten_gm, *, graph_name, request, fx_passes_us):
            lowering = lower(aten_gm, graph_name=graph_name, settings=request.settings)
            ctx = BuildContext.of(request, graph_name, fx_passes_us=fx_passes_us)
            compiled = serve(lowering, ctx, eager=aten_gm, nones=none_outputs(aten_gm), resident=resident)
            names = aot_graph_names()
            graph_type = names[0].partition("_")[2] if names else "inference"
            made.append((compiled, plan_for(aten_gm, len(tensors), graph_type or "inference", compiled)))
            return compiled

        static = _specialize(self.graph, args)
        # A tracing context of its own: AOT Autograd records its metadata (which inputs the graph
        # writes) there, and fakes the inputs in its fake mode (static shapes).
        seam = Seam("neuron", "serve", serve_piece, no_plans_because="the piece makes its own plan (plan_for) per size")
        # The list the piece keeps is the one it compiles with, whenever a size is built: a scope
        # open then (at load time, around another graph) must not replace it.
        with tracing_of_its_own(), scoped_compiler_args(self.compiler_args):
            general = compile_fx_graph(static, tensors, self.options, seam=seam)
        if len(made) == 1 and made[0][1] is not None:  # one inference graph with a plan
            compiled, plan = made[0]
            return _Thin(compiled, plan.mutated_inputs, general)
        return _General(general)


def _sizes_determine_shapes(graph: fx.GraphModule, example_inputs: Sequence[Any]) -> bool:
    """Whether the piece's size arguments give every tensor input's shape: true when the inputs
    as Dynamo traced them (the placeholders' example values, or the example inputs when those are
    symbolic) have only sizes that are constants or expressions of the size arguments' symbols."""
    traced = [node.meta.get("example_value") for node in graph.graph.find_nodes(op="placeholder")]
    if len(traced) != len(example_inputs) or any(v is None for v in traced):
        traced = list(example_inputs)
    symbols: set = set()
    for value in traced:
        if isinstance(value, torch.SymInt):
            symbols |= value.node.expr.free_symbols
        elif not isinstance(value, (torch.Tensor, int)):
            return False
    if not symbols:  # nothing symbolic was seen: the tensors' shapes are what the key goes by
        return False
    for value in traced:
        if isinstance(value, torch.Tensor):
            for dim in value.shape:
                if isinstance(dim, torch.SymInt) and not dim.node.expr.free_symbols <= symbols:
                    return False
    return True
