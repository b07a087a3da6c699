"""A minimal worker: builds the parallel-trace jobs and drives the deferred compile.

The worker resolves each graph's arguments *before* the fork and rides them on the job as its third
element; ``parallel_trace`` opens the scope from it in the child. The native path keeps two-element
jobs (it resolves in-process instead): the plain model, which ``parallel_trace`` captures under the
native seam's key, so the native seam serves the built graphs from the cache.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from reference.flows import parallel_compile, parallel_trace
from reference.runner.model_loading import NeuronModelRunner


class NeuronWorker:
    def __init__(self, model_runner: NeuronModelRunner) -> None:
        self.model_runner = model_runner

    def _build_trace_job(self, graph_type: str | None, kwargs: dict[str, Any] | None = None) -> tuple:
        runner = self.model_runner
        if runner.compiled_model is None:
            runner.load_model()
        kwargs = kwargs if kwargs is not None else runner.model.example_kwargs(graph_type)
        target_model = runner.compiled_model
        if graph_type == "encoder":
            kwargs = {"pixels": kwargs["pixels"]}
        if runner.mode == "native":
            # the plain model: parallel_trace compiles it with the capture seam, keyed natively
            return runner.model, kwargs
        compiler_args = runner.resolve_graph_compiler_args(graph_type)
        return target_model, kwargs, compiler_args

    def trace_jobs(self, graph_types: Sequence[str | None]) -> list[tuple]:
        return [self._build_trace_job(g) for g in graph_types]

    def compile_deferred(
        self, cache_dir: str | os.PathLike, graph_types: Sequence[str | None], *, workers: int = 2,
        timeout: float | None = None, executor=None,
    ):
        """Trace every graph type into ``cache_dir`` in forked children, then build them in parallel
        (``executor``: where, as ``parallel_compile`` takes it; ``None``: its default)."""
        runner = self.model_runner
        native = runner.mode == "native"
        parallel_trace(
            self.trace_jobs(graph_types), cache_dir=cache_dir, workers=workers, timeout=timeout,
            options=runner.compile_options if native else None, key_policy="native" if native else "default",
        )
        base = runner.compile_options.get("compiler_args")
        return parallel_compile(cache_dir, workers=workers, base_compiler_args=base, timeout=timeout, executor=executor)
