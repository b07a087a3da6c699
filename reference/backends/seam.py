"""A seam: where a Dynamo graph enters the pipeline, as one object.

Every way the reference takes a graph from Dynamo is a :class:`Seam`: the registered backends
(``neuron``/``neuron_libtorch``, ``neuron_libtorch_graph_capture``, ``neuron_native_lite``) and the
tools that trace without serving (lowering for the HLO snapshots, building without running). A seam
says

- its ``name`` (the one a compile request, the metrics and the errors carry),
- what it ``does`` with each ATen graph: ``"serve"`` (build or fetch, then load and run),
  ``"stage"`` (key and stage for ``parallel_compile``), ``"lower"`` (lower only, through the
  pipeline's lowering and HLO cache) or ``"build"`` (build or fetch without loading),
- its key policy (``DEFAULT_KEY``, or the native seam's: structure and shapes only), which the
  request it resolves carries down,
- whether it opts into the backend's forced graph breaks (``graph_breaks``), and
- whether inference plans apply (``plans``; a seam that opts out says why in ``no_plans_because``).

The one door is :func:`reference.backends.compile_entry.compile_fx_graph`: it resolves the compile
request, runs the FX passes and AOT Autograd, and hands each ATen graph to :meth:`Seam.graph`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from reference.backends.lowering_fallback import note_failed_graph
from reference.compiler.request import CompileRequest
from reference.core.errors import NEFFCompilationError
from reference.pipeline import DEFAULT_KEY, BuildContext, KeyPolicy, compile_aten_graph

ACTIONS = ("serve", "stage", "lower", "build")

#: ``on_graph(aten_gm, graph_name=, request=, fx_passes_us=)``: what a seam does with one graph;
#: returns the callable AOT Autograd runs for it.
GraphAction = Callable[..., Callable]


def serve_graph(aten_gm: torch.fx.GraphModule, *, graph_name: str, request: CompileRequest, fx_passes_us: int = 0):
    """The ``"serve"`` action: the pipeline's compile_aten_graph, under the request's key policy."""
    return compile_aten_graph(aten_gm, BuildContext.of(request, graph_name, fx_passes_us=fx_passes_us))


@dataclass(frozen=True)
class Seam:
    """One entry into the pipeline (see the module doc)."""

    name: str
    does: str
    on_graph: GraphAction
    key_policy: KeyPolicy = DEFAULT_KEY
    graph_breaks: bool = True
    plans: bool = False
    no_plans_because: str = ""
    #: where the key policy comes from when it is chosen per block (the capture seam's
    #: ``capture_to(key_policy=...)``); ``None``: always ``key_policy``
    key_policy_from: Callable[[], KeyPolicy] | None = None

    def __post_init__(self) -> None:
        if self.does not in ACTIONS:
            raise ValueError(f"seam {self.name!r}: unknown action {self.does!r}; known: {', '.join(ACTIONS)}")
        if not self.plans and not self.no_plans_because:
            raise ValueError(f"seam {self.name!r} opts out of inference plans: say why (no_plans_because)")

    def key_policy_now(self) -> KeyPolicy:
        """The key policy a request made now gets (:func:`~reference.compiler.request.resolve_request`
        puts it on the request; the pipeline keys with the request's)."""
        return self.key_policy_from() if self.key_policy_from is not None else self.key_policy

    def graph(self, aten_gm: torch.fx.GraphModule, *, graph_name: str, request: CompileRequest, fx_passes_us: int = 0) -> Any:
        """Do this seam's work on one ATen graph; returns what AOT Autograd runs for it. A failure
        carries the graph with it, for the backend to learn which call stopped it
        (:mod:`reference.backends.lowering_fallback`)."""
        try:
            return self.on_graph(aten_gm, graph_name=graph_name, request=request, fx_passes_us=fx_passes_us)
        except NEFFCompilationError as exc:
            note_failed_graph(exc, aten_gm, request.settings.cache)
            raise
