"""Build: the artifact of a lowering from the NEFF cache, or compiled under the key's lock with its
failure record and published as one entry (:func:`build`), and the graph's metrics."""

from __future__ import annotations

import datetime
import logging

from reference.cache.errors import CacheFallbackWarning, CacheWriteError
from reference.cache.neff_cache import NeffCache
from reference.compiler.driver import CompilerDriver
from reference.core.build_settings import CacheRoots
from reference.core.diagnostics import Heartbeat, warn_user
from reference.core.errors import CacheMissError, NEFFCompilationError
from reference.core.metrics import METRICS, NeuronCompilationMetrics
from reference.core.schema import ArtifactMetadata
from reference.core.specs import LoweredGraph
from reference.spmd.coordination import store_coordinator
from reference.pipeline.context import BuildContext
from reference.pipeline.artifact_keys import build_metadata, lowering_key
from reference.pipeline.strategies import BuiltArtifact, Lowering

log = logging.getLogger("reference.pipeline")  # the package's one logger (docs/logging.md)


def neff_cache(roots: CacheRoots) -> NeffCache | None:
    """The artifact cache under ``roots`` (a compile request's; a tool or test outside a compile
    passes ``CacheRoots.from_env()``), or ``None`` when caching is disabled."""
    if roots.disabled:
        return None
    return NeffCache(roots.folder("neff"), roots.folder("local"), lock_timeout=roots.lock_timeout_s, hmac_key=roots.hmac_key)


def _fallback(what: str, exc: BaseException, consequence: str) -> None:
    # a warning only (not also a log line: it would print twice), attributed to the user's line
    warn_user(f"{what}: {exc}; {consequence}", CacheFallbackWarning)


def build_artifact(lowered: LoweredGraph, ctx: BuildContext, *, driver: CompilerDriver | None = None) -> BuiltArtifact:
    """:func:`build` for one StableHLO module (a :class:`Lowering` of :data:`SINGLE_MODULE`)."""
    return build(Lowering(lowered), ctx, driver=driver)


def build(lowering: Lowering, ctx: BuildContext, *, driver: CompilerDriver | None = None) -> BuiltArtifact:
    """The artifact of a :class:`Lowering`: from the cache when present, else compiled (by its
    strategy) and published as one cache entry, whatever the strategy.

    A miss takes the key's compile lock, looks again (another process may have published while
    this one waited), checks the key's failure record, compiles, and publishes; a failed compile is
    recorded under the key. A cache or lock directory that cannot be written does not fail the
    compile: it warns (:class:`~reference.cache.errors.CacheFallbackWarning`) and the artifact is
    used uncached. ``ctx`` (made from the compile request) gives the graph's name, the compiler
    configuration, the key policy (how the key is made and checked) and the settings: the cache,
    whether a miss is an error (``assert_cache_hit``) and store coordination. With
    ``store_compile`` the compile step is coordinated over the process group's c10d store
    (:mod:`reference.spmd.coordination`): one rank compiles, the others fetch.
    """
    return _Build(lowering, ctx, driver or CompilerDriver()).run()


class _Build:
    """One call of :func:`build`: the key and the cache it reads, and the steps of a miss."""

    def __init__(self, lowering: Lowering, ctx: BuildContext, driver: CompilerDriver) -> None:
        self.lowering, self.ctx, self.driver = lowering, ctx, driver
        self.graph_name, self.settings = ctx.graph_name, ctx.settings
        self.key, self.breakdown = lowering_key(lowering, ctx.config, ctx.key_policy)
        self.check(None)
        self.cache = neff_cache(ctx.settings.cache)

    def check(self, recorded) -> None:
        """The key policy's check of the arguments against this key (``recorded``: an entry's)."""
        policy = self.ctx.key_policy
        if policy.check is not None:
            policy.check(self.key, self.ctx.config, self.graph_name, recorded)

    def run(self) -> BuiltArtifact:
        cache, key, graph_name = self.cache, self.key, self.graph_name
        if cache is None:
            return self.compile_once_per_world()
        entry = cache.get(key, evict=False)  # without the lock: never evict under someone's feet
        if entry is not None:
            return self.hit(entry)
        try:
            held = cache.acquire(key, graph_name=graph_name)
        except CacheWriteError as exc:
            _fallback(
                "the compile lock could not be taken", exc,
                "compiling without it (another process may compile the same graph at the same time)",
            )
            cache.failures.check(key, graph_name=graph_name)
            METRICS.bump("neff_cache_misses")
            return self.compile_once_per_world()
        with held:
            entry = cache.get(key)  # another process may have published while we waited
            if entry is not None:
                return self.hit(entry)
            cache.failures.check(key, graph_name=graph_name)
            METRICS.bump("neff_cache_misses")
            return self.compile_once_per_world()

    def hit(self, entry) -> BuiltArtifact:
        self.check(entry.metadata.compiler_args)
        METRICS.bump("neff_cache_hits")
        return BuiltArtifact(self.key, self.graph_name, entry.artifact, entry.metadata, cache_hit=True)

    def compile(self) -> BuiltArtifact:
        """Compile (a miss under the key's lock, or without a cache), record a failure under the
        key, publish a success."""
        key, graph_name, cache = self.key, self.graph_name, self.cache
        if self.settings.assert_cache_hit:
            raise CacheMissError(graph_name, key)
        METRICS.bump("compiler_invocations")
        try:
            with Heartbeat(lambda s: f"still compiling graph {graph_name} ({s:.0f} s)"):
                result = self.lowering.strategy.compile(self.lowering, self.ctx.config, graph_name=graph_name, driver=self.driver)
        except NEFFCompilationError as exc:
            if cache is not None:
                try:
                    cache.failures.record(key, graph_name=graph_name, error=exc)
                except OSError as write_exc:
                    log.warning("could not record the failed compile of %s: %s", key, write_exc)
            raise
        meta = build_metadata(self.lowering.graph, key, self.breakdown, self.ctx.config, graph_name)
        meta.compile_time_us = result.wall_us
        meta.extra.update(self.ctx.key_policy.metadata_extra)
        if cache is not None:
            cache.failures.clear(key)
            try:
                meta = cache.put(key, result.artifact, meta).metadata
            except CacheWriteError as exc:
                _fallback("the NEFF cache could not be written", exc, "the compiled artifact is used without being cached")
        return BuiltArtifact(key, graph_name, result.artifact, meta, cache_hit=False)

    def compile_once_per_world(self) -> BuiltArtifact:
        """:meth:`compile`; with ``NEURON_LIBTORCH_STORE_COMPILE`` the first rank of the process
        group to miss compiles and the others fetch its artifact through the c10d store
        (:mod:`reference.spmd.coordination`)."""
        coordinator = store_coordinator(self.settings.store_compile, timeout_s=self.settings.store_wait_s)
        if coordinator is None:
            return self.compile()
        compiled: list[BuiltArtifact] = []

        def compile_here() -> tuple[bytes, str]:
            compiled.append(self.compile())
            return compiled[0].artifact, compiled[0].metadata.to_json()

        artifact, metadata, here = coordinator.build(self.key, self.graph_name, compile_here)
        if here:
            return compiled[0]
        meta = ArtifactMetadata.from_json(metadata, source=f"the c10d store entry of {self.key}")
        METRICS.bump("store_fetches")
        if self.cache is not None:
            try:
                meta = self.cache.put(self.key, artifact, meta).metadata
            except CacheWriteError as exc:
                _fallback("the NEFF cache could not be written", exc)
        return BuiltArtifact(self.key, self.graph_name, artifact, meta, cache_hit=True)


def record_graph_metrics(built: BuiltArtifact, lowering: Lowering, ctx: BuildContext) -> None:
    """One ``get_dynamo_metrics()`` record per compiled graph; every seam that compiles calls this."""
    METRICS.record(
        NeuronCompilationMetrics(
            graph_id=built.key,
            graph_name=built.graph_name,
            model_name=ctx.model_name,
            has_collectives=lowering.strategy.collectives,
            graph_node_count=lowering.graph.node_count,
            timestamp=datetime.datetime.now(datetime.timezone.utc).isoformat(),
            torch_neuronx_fx_passes_us=ctx.fx_passes_us,
            torch_neuronx_lower_us=lowering.lower_us,
            _compile_us=0 if built.cache_hit else built.metadata.compile_time_us,
        )
    )
