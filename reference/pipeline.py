"""One graph through the pipeline: lower, key, look up or compile, load.

The seams (backend.py and friends) decide *which* arguments and passes apply; this module does
the work that is the same for all of them.
"""

from __future__ import annotations

import datetime
import logging
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from reference.cache.key import create_cache_hash, tool_versions
from reference.cache.errors import CacheFallbackWarning, CacheWriteError
from reference.cache.hlo_cache import lower_cached
from reference.cache.neff_cache import NeffCache
from reference.core import env
from reference.compiler.driver import CompilerDriver
from reference.core.errors import CacheMissError, NEFFCompilationError
from reference.lowering.stablehlo import LoweredGraph, lower_to_stablehlo
from reference.core.metrics import METRICS, NeuronCompilationMetrics
from reference.runtime import LoadedArtifact
from reference.core.schema import ArtifactMetadata

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
    return NeffCache(
        env.get(env.NEFF_CACHE_DIR), env.get(env.NEFF_LOCAL_CACHE_DIR), lock_timeout=env.get(env.NEFF_CACHE_LOCK_TIMEOUT)
    )


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


def _fallback(what: str, exc: BaseException) -> None:
    msg = f"{what}: {exc}; compiling without it (the result is not cached)"
    warnings.warn(msg, CacheFallbackWarning, stacklevel=3)
    log.warning(msg)


def build_artifact(
    lowered: LoweredGraph,
    compiler_args: Sequence[str],
    *,
    graph_name: str,
    driver: CompilerDriver | None = None,
    replica_groups=None,
    hlo_normalizer=None,
    compiler_args_in_key: bool = True,
    check_entry: Callable[[Any], None] | None = None,
    metadata_extra: dict | None = None,
) -> BuiltArtifact:
    """The artifact for a lowered graph: from the cache when present, else compiled and published.

    A miss takes the key's compile lock, looks again (another process may have published while
    this one waited), checks the key's failure record, compiles, and publishes. A cache or lock
    directory that cannot be written does not fail the compile: it warns
    (:class:`~reference.cache.errors.CacheFallbackWarning`) and the artifact is used uncached.
    ``replica_groups`` and ``hlo_normalizer`` pass through to :func:`create_cache_hash`.
    ``compiler_args_in_key=False`` is the native seam's key (structure and shapes only);
    ``check_entry`` sees every entry found in the cache before it is used (and may raise);
    ``metadata_extra`` is merged into a new entry's ``extra``.
    """
    key, breakdown = create_cache_hash(
        lowered.hlo, compiler_args if compiler_args_in_key else None, lowered.input_specs, breakdown=True,
        replica_groups=replica_groups, hlo_normalizer=hlo_normalizer,
    )
    cache = neff_cache()
    driver = driver or CompilerDriver()

    def _hit(entry) -> BuiltArtifact:
        if check_entry is not None:
            check_entry(entry)
        METRICS.bump("neff_cache_hits")
        return BuiltArtifact(key, graph_name, entry.artifact, entry.metadata, cache_hit=True)

    def _compile() -> BuiltArtifact:
        if env.get(env.ASSERT_CACHE_HIT):
            raise CacheMissError(graph_name, key)
        METRICS.bump("compiler_invocations")
        try:
            result = driver.compile(lowered.hlo, compiler_args, graph_name=graph_name)
        except NEFFCompilationError as exc:
            if cache is not None:
                try:
                    cache.failures.record(key, graph_name=graph_name, error=exc)
                except OSError as write_exc:
                    log.warning("could not record the failed compile of %s: %s", key, write_exc)
            raise
        meta = build_metadata(lowered, key, breakdown, compiler_args, graph_name)
        meta.compile_time_us = result.wall_us
        meta.extra.update(metadata_extra or {})
        if cache is not None:
            cache.failures.clear(key)
            try:
                meta = cache.put(key, result.artifact, meta).metadata
            except CacheWriteError as exc:
                _fallback("the NEFF cache could not be written", exc)
        return BuiltArtifact(key, graph_name, result.artifact, meta, cache_hit=False)

    if cache is None:
        return _compile()
    entry = cache.get(key, evict=False)  # without the lock: never evict under someone's feet
    if entry is not None:
        return _hit(entry)
    try:
        held = cache.acquire(key, graph_name=graph_name)
    except CacheWriteError as exc:
        _fallback("the compile lock could not be taken", exc)
        cache.failures.check(key, graph_name=graph_name)
        METRICS.bump("neff_cache_misses")
        return _compile()
    with held:
        entry = cache.get(key)  # another process may have published while we waited
        if entry is not None:
            return _hit(entry)
        cache.failures.check(key, graph_name=graph_name)
        METRICS.bump("neff_cache_misses")
        return _compile()


def record_graph_metrics(
    built: BuiltArtifact, *, model_name: str, collectives: bool, node_count: int, fx_passes_us: int, lower_us: int
) -> None:
    """One ``get_dynamo_metrics()`` record per compiled graph; every seam that compiles calls this."""
    METRICS.record(
        NeuronCompilationMetrics(
            graph_id=built.key,
            graph_name=built.graph_name,
            model_name=model_name,
            has_collectives=collectives,
            graph_node_count=node_count,
            timestamp=datetime.datetime.now(datetime.timezone.utc).isoformat(),
            torch_neuronx_fx_passes_us=fx_passes_us,
            torch_neuronx_lower_us=lower_us,
            _compile_us=0 if built.cache_hit else built.metadata.compile_time_us,
        )
    )


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
    lowered = lower_cached(aten_gm, graph_name=graph_name, lower=lower_to_stablehlo)  # HLO cache first
    lower_us = int((time.perf_counter() - start) * 1e6)
    built = build_artifact(lowered, compiler_args, graph_name=graph_name)
    record_graph_metrics(
        built, model_name=model_name, collectives=has_collectives(aten_gm), node_count=lowered.node_count,
        fx_passes_us=fx_passes_us, lower_us=lower_us,
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
