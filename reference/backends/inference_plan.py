"""Inference graphs without AOT Autograd at run time, and, on a warm start, without its trace.

For most inference graphs AOT Autograd's runtime wrapper has one job: copy the new values of the
inputs the graph writes (a KV cache, a running statistic) back into the caller's tensors. Its
general machinery (output aliases regenerated from views, synthetic bases, tensor subclasses,
effect tokens, autograd) costs on every call and, worse, its trace of the Dynamo graph costs about
half of a warm process's first call, because the HLO cache is keyed on the ATen graph the trace
produces.

So, for a graph where nothing but that copy is needed (:func:`plan_for`), the neuron seam makes
an :class:`~reference.cache.plan_cache.InferencePlan` during the cold compile. It hands Dynamo a
:class:`PlannedCall` (the runtime call plus that copy) instead of AOT Autograd's wrapper, and
records the plan; on the next start it finds the plan under the Dynamo graph's own key
(:func:`plan_key`) and serves the graph from the HLO and NEFF caches directly
(:func:`serve_planned`): no AOT trace, and the same thin call path. Every other graph, and any graph whose plan or
HLO record is missing or unusable, goes through AOT Autograd as before.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any, Callable, Sequence

import torch

from reference.cache.hlo_cache import hlo_cache
from reference.cache.plan_cache import InferencePlan, create_plan_key, input_signature, plan_cache
from reference.core.build_settings import BuildSettings, CacheRoots
from reference.core.metrics import METRICS
from reference.core.torch_compat import aot_inference_facts, functorch_config, next_aot_id
from reference.lowering import decompositions, nki_sdpa, sorting
from reference.lowering.stablehlo import lowering_fingerprint
from reference.compiler.request import CompileRequest
from reference.pipeline import BuildContext, CompiledGraph, Lowering, serve, static_input_indices

log = logging.getLogger(__name__)


def _source_digest() -> str:
    """The code that shapes what a plan stands for without being in the Dynamo graph: this module
    and the decompositions AOT Autograd applies (the SDPA switch's and the backend's own; torch's
    and torch-mlir's follow their versions, in the key's tool versions). Read instead of building
    the decomposition table, which costs a warm start more than a second (it imports torch-mlir)."""
    digest = hashlib.sha256()
    for path in (__file__, nki_sdpa.__file__, decompositions.__file__, sorting.__file__):
        with open(path, "rb") as fh:
            digest.update(fh.read())
    return digest.hexdigest()[:16]


def _aot_config_digest() -> str:
    """AOT Autograd's configuration (``torch._functorch.config``, in the portable form its own
    cache keys on): a process that changed it traces graphs differently, so it gets other plans."""
    text = json.dumps(functorch_config().save_config_portable(), sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def plan_key(
    digest: str | Callable[[], str], example_inputs: Sequence[Any], pass_identity: str, settings: BuildSettings
) -> str | None:
    """The plan-cache key of a Dynamo graph about to be compiled (``digest``: its
    :func:`~reference.cache.plan_cache.graph_digest`, or a function that makes it), or ``None``
    when it cannot have a plan: caching is off or the request is compile-only (``settings``, the
    request's), an input is not a plain tensor, one needs
    gradients (a training graph), or AOT Autograd is asked to bundle what it compiles into its own
    cache entry (``aot_compile`` does), which takes AOT's compiled output and not a planned call."""
    if settings.cache.disabled or settings.compile_only:
        return None
    if functorch_config().bundled_autograd_cache:
        return None
    signature = input_signature(example_inputs)
    if signature is None:
        return None
    if torch.is_grad_enabled() and any(t.requires_grad for t in example_inputs):
        return None
    context = {
        "grad_enabled": torch.is_grad_enabled(),
        "autocast_cpu": [torch.is_autocast_enabled("cpu"), str(torch.get_autocast_dtype("cpu"))],
        "default_dtype": str(torch.get_default_dtype()),
        "passes": pass_identity,
        "nki_sdpa": bool(settings.nki_sdpa),
        "lowering": lowering_fingerprint(),
        "source": _source_digest(),
        "aot_config": _aot_config_digest(),
    }
    return create_plan_key(digest() if callable(digest) else digest, signature, context)


def plan_for(aten_gm: torch.fx.GraphModule, n_inputs: int, graph_type: str, compiled: Any) -> InferencePlan | None:
    """The plan of a graph AOT Autograd just traced (call it inside the forward compiler), or
    ``None`` when its runtime wrapper does more than copy mutated inputs back (the reason is logged
    at debug level)."""

    def no(why: str) -> None:
        log.debug("no inference plan for %s: %s", getattr(compiled, "graph_name", "a graph"), why)
        return None

    if graph_type != "inference":
        return no(f"a {graph_type} graph")
    if not isinstance(compiled, CompiledGraph) or compiled.lowering is None or compiled.loaded is None:
        return no("not served by the pipeline, or not loaded (compile-only mode)")
    lowering: Lowering = compiled.lowering
    if not lowering.strategy.plan_replay:
        return no(f"lowered as {lowering.strategy.name}, which a plan cannot replay")
    facts = aot_inference_facts()
    if facts is None:
        return no("AOT Autograd's metadata is not available")
    placeholders = aten_gm.graph.find_nodes(op="placeholder")
    if len(placeholders) != n_inputs or facts.n_inputs != n_inputs:
        return no("AOT Autograd changed the inputs (duplicates, synthetic bases or lifted parameters)")
    if facts.why_not is not None:
        return no(facts.why_not)
    mutated = facts.mutated_inputs
    outputs = aten_gm.graph.output_node().args[0]
    if not isinstance(outputs, (list, tuple)) or len(outputs) != len(mutated) + facts.n_outputs:
        return no("the forward graph's outputs are not the mutated inputs and the user outputs")
    if len(lowering.graph.output_specs) != len(outputs):
        return no("the lowered module returns another number of outputs")
    return InferencePlan(
        hlo_key=lowering.hlo_key or "",  # empty when the HLO cache did not keep the text: not stored
        n_inputs=n_inputs,
        mutated_inputs=mutated,
        n_outputs=facts.n_outputs,
        static_inputs=tuple(static_input_indices()),
        aten_code=aten_gm.code,
    )


def record(key: str, plan: InferencePlan | None, roots: CacheRoots) -> None:
    """Store ``plan`` under ``key`` for the next start (not a plan whose text has no HLO record)."""
    cache = plan_cache(roots)
    if plan is not None and plan.hlo_key and cache is not None:
        cache.put(key, plan)


class PlannedCall:
    """The call path of a planned graph: the runtime call, then the mutated inputs' new values
    copied back into the caller's tensors; returns the user outputs."""

    __slots__ = ("_run", "_mutated", "_n_mutated", "graph_name")

    def __init__(self, run: Callable, plan: InferencePlan, graph_name: str) -> None:
        self._run = run
        self._mutated = plan.mutated_inputs
        self._n_mutated = len(plan.mutated_inputs)
        self.graph_name = graph_name

    def __call__(self, *args: torch.Tensor) -> list[torch.Tensor]:
        outs = self._run(*args)
        n = self._n_mutated
        if not n:
            return outs
        with torch.no_grad():
            for i, new in zip(self._mutated, outs):
                args[i].detach().copy_(new)  # detach: a leaf that requires grad may be written this way
        return outs[n:]


def serve_planned(
    key: str, n_inputs: int, request: CompileRequest, *, fx_passes_us: int = 0
) -> tuple[PlannedCall, CompiledGraph, InferencePlan] | None:
    """The graph of plan ``key`` from the caches of the compile request's settings, served under
    the request, or ``None`` (no plan, or its HLO record is gone)."""
    settings, model_name = request.settings, request.model_name
    cache = plan_cache(settings.cache)
    plan = cache.get(key) if cache is not None else None
    if plan is None:
        return None
    hlo = hlo_cache(settings.cache)
    lowered = hlo.get(plan.hlo_key) if hlo is not None else None
    if lowered is None or plan.n_inputs != n_inputs or len(lowered.input_specs) != n_inputs or (
        len(lowered.output_specs) != len(plan.mutated_inputs) + plan.n_outputs
    ):
        log.warning("the plan %s does not fit its graph or its HLO record is gone; tracing the graph again", key)
        return None
    aot_id = next_aot_id()  # the number AOT Autograd would have given it: the same graph names warm or cold
    nth = METRICS.next_graph_index(model_name, str(aot_id), "inference")
    graph_name = f"{model_name}_{aot_id}_inference_{nth}"
    METRICS.bump("hlo_cache_hits")
    METRICS.bump("plan_cache_hits")
    ctx = BuildContext.of(request, graph_name, fx_passes_us=fx_passes_us)
    compiled = serve(Lowering(lowered, hlo_key=plan.hlo_key), ctx, resident=plan.static_inputs)
    return PlannedCall(compiled, plan, graph_name), compiled, plan
