"""One graph through the pipeline: lower, key, look up or compile, load.

The seams (backend.py and friends) decide *which* arguments and passes apply; this module does
the work that is the same for all of them.
"""

from __future__ import annotations

import datetime
import logging
import os
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from reference.cache.key import create_cache_hash, tool_versions
from reference.cache.neff_cache import NeffCache
from reference.compile import env
from reference.compile.compiler_driver import CompilerDriver
from reference.compile.errors import CacheMissError
from reference.compile.lowering import LoweredGraph, lower_to_stablehlo
from reference.compile.metrics import METRICS, NeuronCompilationMetrics
from reference.compile.runtime import LoadedArtifact
from reference.compile.schema import ArtifactMetadata

log = logging.getLogger(__name__)

_COLLECTIVE_MARKERS = ("_c10d_functional", "all_reduce", "all_gather", "reduce_scatter", "all_to_all")


@dataclass
class BuiltArtifact:
    key: str
    graph_name: str
    artifact: bytes
    metadata: ArtifactMetadata
    cache_hit: bool


def neff_cache() -> NeffCache | None:
    """The configured artifact cache, or ``None`` when ``TORCH_NEURONX_NEFF_DISABLE_CACHE`` is set."""
    if env.get(env.NEFF_DISABLE_CACHE):
        return None
    return NeffCache(env.get(env.NEFF_CACHE_DIR), env.get(env.NEFF_LOCAL_CACHE_DIR))


def has_collectives(gm: torch.fx.GraphModule) -> bool:
    for node in gm.graph.nodes:
        if node.op == "call_function" and any(m in str(node.target) for m in _COLLECTIVE_MARKERS):
            return True
    return False


def build_metadata(lowered: LoweredGraph, key: str, breakdown: dict, compiler_args: Sequence[str], graph_name: str) -> ArtifactMetadata:
    return ArtifactMetadata(
        cache_key=key,
        graph_name=graph_name,
        compiler_args=list(compiler_args),
        key_components=breakdown["components"],
        input_specs=[s.as_json() for s in lowered.input_specs],
        output_specs=[s.as_json() for s in lowered.output_specs],
        versions=dict(tool_versions()),
    )


def build_artifact(
    lowered: LoweredGraph,
    compiler_args: Sequence[str],
    *,
    graph_name: str,
    driver: CompilerDriver | None = None,
) -> BuiltArtifact:
    """The artifact for a lowered graph: from the cache when present, else compiled and published."""
    key, breakdown = create_cache_hash(lowered.hlo, compiler_args, lowered.input_specs, breakdown=True)
    cache = neff_cache()
    driver = driver or CompilerDriver()

    def _compile() -> BuiltArtifact:
        if env.get(env.ASSERT_CACHE_HIT):
            raise CacheMissError(graph_name, key)
        METRICS.bump("compiler_invocations")
        result = driver.compile(lowered.hlo, compiler_args, graph_name=graph_name)
        meta = build_metadata(lowered, key, breakdown, compiler_args, graph_name)
        meta.compile_time_us = result.wall_us
        if cache is not None:
            entry = cache.put(key, result.artifact, meta)
            meta = entry.metadata
        return BuiltArtifact(key, graph_name, result.artifact, meta, cache_hit=False)

    if cache is None:
        return _compile()
    entry = cache.get(key)
    if entry is None:
        import filelock

        lock_path = cache.lock_path(key)
        os.makedirs(os.path.dirname(lock_path), exist_ok=True)
        with filelock.FileLock(lock_path, timeout=env.get(env.NEFF_CACHE_LOCK_TIMEOUT)):
            entry = cache.get(key)  # another process may have published while we waited
            if entry is None:
                METRICS.bump("neff_cache_misses")
                return _compile()
    METRICS.bump("neff_cache_hits")
    return BuiltArtifact(key, graph_name, entry.artifact, entry.metadata, cache_hit=True)


class CompiledGraph:
    """What the backend hands back to AOT Autograd for one graph."""

    def __init__(self, built: BuiltArtifact, loaded: LoadedArtifact | None, eager: Callable | None) -> None:
        self.built = built
        self.loaded = loaded
        self._eager = eager
        self.key = built.key
        self.graph_name = built.graph_name

    def __call__(self, *args: torch.Tensor):
        if self.loaded is None:  # compile-only mode: artifacts exist, outputs come from eager
            return self._eager(*args)
        return self.loaded(*args)


def compile_aten_graph(
    aten_gm: torch.fx.GraphModule,
    *,
    graph_name: str,
    compiler_args: Sequence[str],
    model_name: str,
    fx_passes_us: int = 0,
) -> CompiledGraph:
    """Lower, build (or fetch) and load one ATen graph, recording its metrics."""
    if has_collectives(aten_gm):  # split at the collectives: see reference/spmd/program.py
        from reference.spmd.program import compile_spmd_graph

        return compile_spmd_graph(
            aten_gm, graph_name=graph_name, compiler_args=compiler_args, model_name=model_name, fx_passes_us=fx_passes_us
        )
    start = time.perf_counter()
    lowered = lower_to_stablehlo(aten_gm, graph_name=graph_name)
    lower_us = int((time.perf_counter() - start) * 1e6)
    built = build_artifact(lowered, compiler_args, graph_name=graph_name)
    METRICS.record(
        NeuronCompilationMetrics(
            graph_id=built.key,
            graph_name=graph_name,
            model_name=model_name,
            has_collectives=has_collectives(aten_gm),
            graph_node_count=lowered.node_count,
            timestamp=datetime.datetime.now(datetime.timezone.utc).isoformat(),
            torch_neuronx_fx_passes_us=fx_passes_us,
            torch_neuronx_lower_us=lower_us,
            _compile_us=0 if built.cache_hit else built.metadata.compile_time_us,
        )
    )
    if env.get(env.COMPILE_ONLY):
        graph = CompiledGraph(built, None, aten_gm)
    else:
        loaded = LoadedArtifact(
            built.artifact, graph_name=graph_name, input_specs=lowered.input_specs, output_specs=lowered.output_specs
        )
        graph = CompiledGraph(built, loaded, aten_gm)
    graph.hlo = lowered.hlo  # for the debug directory (issue 4)
    return graph
