"""AOT Autograd for the backend: a Dynamo graph becomes the ATen graphs the seams compile (an
inference graph, or a forward and a backward), with the backward's compile deferred to its first
call."""

from __future__ import annotations

from typing import Callable

import torch

from reference.backends.fallback import eager_fallback, with_fallback
from reference.core.errors import NeuronBackendError
from reference.core.torch_compat import aot_autograd_backend, aot_module_simplified, functorch_config, make_boxed_func


def trace_aten_graphs(gm: torch.fx.GraphModule, example_inputs: list, fw_compiler: Callable, bw_compiler: Callable, decompositions) -> Callable:
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



class BackwardGraph:
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
                self._run = with_fallback(self._build(), self._aten_gm, fallback=self._fallback)
            except NeuronBackendError as exc:
                self._run = eager_fallback(exc, self._aten_gm, fallback=self._fallback)
        return self._run(*args)
