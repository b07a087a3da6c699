"""The reference's policy runner, shaped for the conformance suite's compiler-args adapter methods."""

from __future__ import annotations

from typing import Any

import torch

from conformance.harness.capabilities import CompilerArgsCapability, PolicyRunner


class ReferencePolicyRunner(PolicyRunner):
    """``NeuronModelRunner`` loaded with a policy fixture model built on ``helpers`` (the
    reference's compiler-args capability)."""

    def __init__(self, helpers: CompilerArgsCapability, policy: str, mode: str, compiler_args, optimization_level) -> None:
        from neuron_fixtures.policy import build_policy_model
        from reference.runner import NeuronModelRunner, NeuronWorker

        self.model = build_policy_model(helpers, policy)
        self.runner = NeuronModelRunner(
            self.model, compiler_args=compiler_args, optimization_level=optimization_level, mode=mode
        ).load_model()
        self.worker = NeuronWorker(self.runner)

    @property
    def base_compiler_args(self) -> list[str]:
        return list(self.runner.compile_options["compiler_args"])

    def resolve(self, graph_type):
        return self.runner.resolve_graph_compiler_args(graph_type)

    def example(self, graph_type) -> dict:
        return self.model.example_kwargs(graph_type)

    def _observe(self, call) -> dict[str, Any]:
        from reference.core.metrics import METRICS
        from reference.core.build_settings import CacheRoots
        from reference.pipeline import neff_cache

        before = len(METRICS.records())
        with torch.no_grad():
            outputs = call()
        graphs = []
        cache = neff_cache(CacheRoots.from_env())
        for m in METRICS.records()[before:]:
            entry = cache.get(m.graph_id) if cache is not None else None
            graphs.append(
                {
                    "graph_name": m.graph_name,
                    "cache_key": m.graph_id,
                    "compiler_args": entry.metadata.compiler_args if entry is not None else None,
                }
            )
        return {"outputs": outputs, "graphs": graphs}

    def run(self, graph_type, kwargs=None) -> dict[str, Any]:
        kwargs = kwargs if kwargs is not None else self.example(graph_type)
        return self._observe(lambda: self.runner.run_site(graph_type, **kwargs))

    def run_unscoped(self, graph_type, kwargs=None) -> dict[str, Any]:
        kwargs = kwargs if kwargs is not None else self.example(graph_type)
        return self._observe(lambda: self.runner.compiled_model(**kwargs))

    def eager(self, graph_type, kwargs=None):
        kwargs = kwargs if kwargs is not None else self.example(graph_type)
        with torch.no_grad():
            return self.model(**kwargs)

    def trace_job(self, graph_type) -> tuple:
        return self.worker._build_trace_job(graph_type)
