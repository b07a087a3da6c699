"""One path for one ATen graph: lower -> key -> build -> load, for every seam and tool.

- **lower** (:func:`lower`): a :class:`LoweringStrategy` follows the graph. A graph without
  collectives is one StableHLO module (:data:`SINGLE_MODULE`); a graph with collectives is an SPMD
  program (:data:`SPMD_PROGRAM`): cut at its collectives (:mod:`reference.spmd.split`), each piece
  lowered like any graph, and the whole program written as one StableHLO module
  (:mod:`reference.lowering.program`). Every StableHLO module is lowered through the HLO cache.
- **key** (:func:`lowering_key`): :func:`~reference.cache.key.create_cache_hash` of the strategy's
  key material (the keyed text, its input specs, a program's meshes), the compiler arguments and
  the tool versions, under a :class:`KeyPolicy` (the native seam leaves the arguments out of its
  key and checks they never change for one key).
- **build** (:func:`build`): from the NEFF cache, or compiled by the strategy under the key's lock,
  with the key's failure record, and published (one cache entry, whatever the strategy).
- **load** (:func:`load`): the artifact as a callable (the strategy's loader); an artifact from the
  cache that will not load is evicted and rebuilt once.

A strategy only says what differs between kinds of graphs: how to lower one, what its key hashes,
how to compile the lowered text into one artifact and how to load that artifact. Everything around
those steps (HLO cache, key, lock, failure record, atomic publish, compile coordination over the
store, load-or-rebuild, staging) is this module's and the same for every strategy.

:func:`compile_aten_graph` runs all four and records the graph's metrics once. The capture seam
stops after the key and stages the graph (:func:`stage`); ``parallel_compile`` picks a staged entry
up again (:func:`staged_lowering`) and builds it. The seams decide *which* arguments and passes
apply; this module does the work that is the same for all of them. docs/request_flow.md shows
where this module sits on the way from ``torch.compile`` to a compiled graph.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence

import torch

from reference.cache.errors import CacheFallbackWarning, CacheWriteError, UnloadableArtifactError
from reference.cache.hlo_cache import PASS_IDENTITY_META, create_hlo_cache_key, hlo_cache
from reference.cache.key import create_cache_hash, tool_versions
from reference.cache.neff_cache import NeffCache
from reference.cache.staging import StagedGraph, write_staged
from reference.compiler.driver import CompileResult, CompilerDriver
from reference.core.build_settings import BuildSettings, CacheRoots
from reference.core.diagnostics import Heartbeat, warn_user
from reference.core.errors import CacheMissError, NEFFCompilationError, NEFFExecutionError, PrecisionError, PrecisionWarning
from reference.core.metrics import METRICS, NeuronCompilationMetrics
from reference.core.schema import ArtifactMetadata, MetadataError
from reference.core.specs import LoweredGraph
from reference.core.torch_compat import current_tracing_context
from reference.fx_passes import get_default_pass_manager
from reference.lowering.cost import estimate_flops
from reference.lowering.program import LoweredProgram, program_text
from reference.lowering.stablehlo import (
    input_specs, lower_to_stablehlo, lowering_fingerprint, none_outputs, output_specs, with_none_outputs,
)
from reference.runtime import LoadedArtifact, LoadedProgram, pack_bundle
from reference.spmd.collectives import has_collectives
from reference.spmd.coordination import store_coordinator
from reference.spmd.mesh import MESH_REGISTRY
from reference.spmd.split import split_at_collectives

log = logging.getLogger(__name__)

@dataclass
class BuiltArtifact:
    key: str
    graph_name: str
    artifact: bytes
    metadata: ArtifactMetadata
    cache_hit: bool


def neff_cache(roots: CacheRoots | None = None) -> NeffCache | None:
    """The artifact cache under ``roots`` (a compile request's; ``None``: the roots the environment
    names now, for a tool or test outside a compile), or ``None`` when caching is disabled."""
    roots = roots or CacheRoots.from_env()
    if roots.disabled:
        return None
    return NeffCache(roots.folder("neff"), roots.folder("local"), lock_timeout=roots.lock_timeout_s, hmac_key=roots.hmac_key)


def _settings(settings: BuildSettings | None) -> BuildSettings:
    """A caller's settings, or (a tool or test outside a compile) what the environment gives now."""
    return settings if settings is not None else BuildSettings.from_env()


__all__ = [
    "BuiltArtifact", "CompiledGraph", "DEFAULT_KEY", "KeyMaterial", "KeyPolicy", "Lowering", "LoweringStrategy",
    "NATIVE_KEY", "SINGLE_MODULE", "SPMD_PROGRAM", "build", "build_artifact", "cache_key", "compile_aten_graph",
    "has_collectives", "load", "lower", "lower_cached", "lowering_key", "neff_cache", "serve", "stage",
    "staged_lowering",
]


# --- lowering strategies --------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyMaterial:
    """What a lowering's key hashes besides the compiler arguments and the tool versions: the keyed
    text with its input specs (``graph``), and the meshes of its collectives by channel
    (``replica_groups``; ``None`` for a graph without collectives)."""

    graph: LoweredGraph
    replica_groups: dict[str, list[list[int]]] | None = None


class LoweringStrategy(Protocol):
    """How one kind of graph is lowered, keyed, compiled into one artifact and loaded.

    ``collectives``: whether graphs of this kind run collectives (a metrics and metadata field).
    ``plan_replay``: whether a served graph of this kind can be replayed from an inference plan
    (its one module comes back from the HLO cache under ``Lowering.hlo_key``). ``compile`` raises
    :class:`~reference.core.errors.NEFFCompilationError` naming what the compiler rejected; the
    pipeline records it and publishes nothing. ``document``/``from_staged``: what a staged entry
    keeps beside the keyed text so another process can build it without the graph.
    """

    name: str
    collectives: bool
    plan_replay: bool

    def lower(self, aten_gm: torch.fx.GraphModule, *, graph_name: str, cache: CacheRoots) -> "Lowering": ...

    def key_material(self, lowering: "Lowering") -> KeyMaterial: ...

    def compile(
        self, lowering: "Lowering", compiler_args: Sequence[str], *, graph_name: str, driver: CompilerDriver
    ) -> CompileResult: ...

    def load(self, built: BuiltArtifact, lowering: "Lowering", *, resident: Sequence[int], driver: str) -> Callable: ...

    def document(self, lowering: "Lowering") -> dict[str, Any] | None: ...

    def from_staged(self, entry: StagedGraph) -> "Lowering": ...


def _compile_module(
    driver: CompilerDriver, lowered: LoweredGraph, compiler_args: Sequence[str], *, graph_name: str
) -> CompileResult:
    """One StableHLO module through the compiler driver; a rejected op is named
    (:func:`name_rejected_op`)."""
    try:
        return driver.compile(lowered.hlo, compiler_args, graph_name=graph_name)
    except NEFFCompilationError as raw:
        named = name_rejected_op(raw, lowered, graph_name)
        if named is raw:
            raise
        raise named from raw


class SingleModule:
    """A graph without collectives: one StableHLO module (through the HLO cache), compiled to one
    binary and loaded into the runtime."""

    name = "single_module"
    collectives = False
    plan_replay = True

    def lower(self, aten_gm: torch.fx.GraphModule, *, graph_name: str, cache: CacheRoots) -> "Lowering":
        lowered, key = _lower_keyed(aten_gm, graph_name=graph_name, cache=cache)
        return Lowering(lowered, self, hlo_key=key)

    def key_material(self, lowering: "Lowering") -> KeyMaterial:
        return KeyMaterial(lowering.graph)

    def compile(self, lowering, compiler_args, *, graph_name, driver) -> CompileResult:
        return _compile_module(driver, lowering.graph, compiler_args, graph_name=graph_name)

    def load(self, built: BuiltArtifact, lowering: "Lowering", *, resident: Sequence[int], driver: str) -> Callable:
        return LoadedArtifact(
            built.artifact, graph_name=built.graph_name, input_specs=lowering.graph.input_specs,
            output_specs=lowering.graph.output_specs, resident=resident, work=estimate_flops(lowering.graph.hlo),
            driver=driver,
        )

    def document(self, lowering: "Lowering") -> None:
        return None

    def from_staged(self, entry: StagedGraph) -> "Lowering":
        return Lowering(entry.lowered(), self)


class SPMDProgramStrategy:
    """A graph with collectives: cut at its collectives (:func:`~reference.spmd.split.split_at_collectives`),
    every piece lowered through the HLO cache, the whole program written as one StableHLO module
    (the keyed text), keyed with its meshes, compiled piece by piece into one bundle (one cache
    entry) and loaded as a :class:`~reference.runtime.LoadedProgram` that runs the collectives over
    this rank's groups of the meshes."""

    name = "spmd_program"
    collectives = True
    plan_replay = False

    def lower(self, aten_gm: torch.fx.GraphModule, *, graph_name: str, cache: CacheRoots) -> "Lowering":
        split = split_at_collectives(aten_gm, graph_name=graph_name)
        identity = pass_identity(aten_gm)
        pieces = []
        for i, piece in enumerate(split.pieces):
            piece.meta[PASS_IDENTITY_META] = identity  # the pieces went through the graph's passes
            pieces.append(_lower_keyed(piece, graph_name=split.piece_name(i), cache=cache)[0])
        text = program_text(
            graph_name, pieces, split.steps, split.inputs, [o for o in split.outputs if o is not None], split.specs
        )
        program = LoweredProgram(
            graph_name, text, pieces, split.steps, split.inputs, split.outputs,
            tuple(split.specs[v] for v in split.inputs), output_specs(aten_gm), split.node_count, split.collectives,
        )
        return Lowering(program.lowered(), self, program)

    def key_material(self, lowering: "Lowering") -> KeyMaterial:
        return KeyMaterial(lowering.graph, lowering.detail.replica_groups())

    def compile(self, lowering, compiler_args, *, graph_name, driver) -> CompileResult:
        program: LoweredProgram = lowering.detail
        start = time.perf_counter()
        results = []
        for i, piece in enumerate(program.pieces):
            METRICS.bump("spmd_piece_compiles")
            results.append(_compile_module(driver, piece, compiler_args, graph_name=f"{graph_name}_piece{i}"))
        return CompileResult(
            pack_bundle(program.manifest(), [r.artifact for r in results]),
            command=results[0].command if results else [],
            log="".join(r.log for r in results),
            wall_us=int((time.perf_counter() - start) * 1e6),
        )

    def load(self, built: BuiltArtifact, lowering: "Lowering", *, resident: Sequence[int], driver: str) -> Callable:
        pieces = lowering.detail.pieces

        def load_piece(i: int, binary: bytes) -> LoadedArtifact:
            piece = pieces[i] if i < len(pieces) else None
            return LoadedArtifact(
                binary, graph_name=f"{built.graph_name}_piece{i}",
                input_specs=piece.input_specs if piece else (), output_specs=piece.output_specs if piece else (),
                work=estimate_flops(piece.hlo) if piece else None, driver=driver,
            )

        return LoadedProgram(
            built.artifact, graph_name=built.graph_name, load_piece=load_piece,
            group_name_of=lambda channel: MESH_REGISTRY.local_group(channel).group_name,
        )

    def document(self, lowering: "Lowering") -> dict[str, Any]:
        return lowering.detail.to_json()

    def from_staged(self, entry: StagedGraph) -> "Lowering":
        if entry.document is None:
            raise MetadataError(
                f"{entry.path}: the staged SPMD program has no document of its pieces; capture the graph again"
            )
        return Lowering(entry.lowered(), self, LoweredProgram.from_json(entry.document, entry.hlo))


SINGLE_MODULE = SingleModule()
SPMD_PROGRAM = SPMDProgramStrategy()


def strategy_for(aten_gm: torch.fx.GraphModule) -> LoweringStrategy:
    """The strategy a graph's content asks for: a program when it calls collectives."""
    return SPMD_PROGRAM if has_collectives(aten_gm) else SINGLE_MODULE


# --- lower ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Lowering:
    """One graph lowered under its strategy: ``graph`` is the keyed text with its specs (the
    StableHLO module, or the whole-program text of an SPMD program); ``detail`` is what the
    strategy keeps beyond it (a program's pieces and steps; ``None`` for a single module)."""

    graph: LoweredGraph
    strategy: LoweringStrategy = SINGLE_MODULE
    detail: Any = None
    lower_us: int = 0
    #: the HLO cache key the text is filed under (``None`` for a program, or with caching off)
    hlo_key: str | None = None

    @property
    def replica_groups(self) -> dict[str, list[list[int]]] | None:
        """The meshes the key hashes (``None`` for a graph without collectives)."""
        return self.strategy.key_material(self).replica_groups


def pass_identity(aten_gm: torch.fx.GraphModule) -> str:
    """The FX pass pipeline that ran on ``aten_gm``, as the seam recorded it
    (``gm.meta[PASS_IDENTITY_META]``; the HLO cache keys on it); a graph that carries none is taken
    to have been through the default pipeline."""
    return aten_gm.meta.get(PASS_IDENTITY_META) or get_default_pass_manager().uuid()


def lower_cached(aten_gm: torch.fx.GraphModule, *, graph_name: str, settings: BuildSettings | None = None) -> LoweredGraph:
    """``lower_to_stablehlo`` through the HLO cache of ``settings`` (none when caching is off)."""
    return _lower_keyed(aten_gm, graph_name=graph_name, cache=_settings(settings).cache)[0]


def _lower_keyed(aten_gm: torch.fx.GraphModule, *, graph_name: str, cache: CacheRoots) -> tuple[LoweredGraph, str | None]:
    cache = hlo_cache(cache)
    if cache is None:
        METRICS.bump("lowerings")
        return lower_to_stablehlo(aten_gm, graph_name=graph_name), None
    key = create_hlo_cache_key(
        aten_gm, input_specs(aten_gm, graph_name), pass_identity(aten_gm), lowering=lowering_fingerprint()
    )
    hit = cache.get(key)
    if hit is not None:
        METRICS.bump("hlo_cache_hits")
        return hit, key
    METRICS.bump("lowerings")
    lowered = lower_to_stablehlo(aten_gm, graph_name=graph_name)
    return lowered, key if cache.put(key, lowered) else None


def lower(aten_gm: torch.fx.GraphModule, *, graph_name: str, settings: BuildSettings | None = None) -> Lowering:
    """Lower one ATen graph under the strategy its content asks for (:func:`strategy_for`),
    through the HLO cache of ``settings`` (a compile request's; ``None``: the environment's now)."""
    start = time.perf_counter()
    lowering = strategy_for(aten_gm).lower(aten_gm, graph_name=graph_name, cache=_settings(settings).cache)
    return dataclasses.replace(lowering, lower_us=int((time.perf_counter() - start) * 1e6))


# --- key ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyPolicy:
    """How a seam keys its artifacts. ``compiler_args_in_key=False`` is the native seam's
    structure-and-shape key; ``check(key, compiler_args, graph_name, recorded)`` runs before a
    build (``recorded=None``) and on every cache entry found (``recorded``: the arguments the entry
    was built with) and may raise; ``metadata_extra`` goes into a new entry's ``extra``."""

    name: str = "default"
    compiler_args_in_key: bool = True
    check: Callable[[str, Sequence[str], str, Sequence[str] | None], None] | None = None
    metadata_extra: Mapping[str, Any] = field(default_factory=dict)


DEFAULT_KEY = KeyPolicy()
NATIVE_KEY = KeyPolicy("native", compiler_args_in_key=False, metadata_extra={"seam": "neuron_native_lite"})
KEY_POLICIES = {p.name: p for p in (DEFAULT_KEY, NATIVE_KEY)}


def cache_key(
    lowered: LoweredGraph, compiler_args: Sequence[str], *, replica_groups=None, key_policy: KeyPolicy = DEFAULT_KEY,
    hlo_normalizer=None,
) -> tuple[str, dict]:
    """The artifact key of a lowered graph and its breakdown (the one place a seam's key is made)."""
    return create_cache_hash(
        lowered.hlo, compiler_args if key_policy.compiler_args_in_key else None, lowered.input_specs, breakdown=True,
        replica_groups=replica_groups, hlo_normalizer=hlo_normalizer,
    )


def lowering_key(lowering: Lowering, compiler_args: Sequence[str], *, key_policy: KeyPolicy = DEFAULT_KEY) -> tuple[str, dict]:
    """The artifact key of a :class:`Lowering` (its strategy's key material) and its breakdown."""
    material = lowering.strategy.key_material(lowering)
    return cache_key(material.graph, compiler_args, replica_groups=material.replica_groups, key_policy=key_policy)


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


def _fallback(what: str, exc: BaseException, consequence: str) -> None:
    # a warning only (not also a log line: it would print twice), attributed to the user's line
    warn_user(f"{what}: {exc}; {consequence}", CacheFallbackWarning)


_STDIN_ERROR = re.compile(r"<stdin>:(\d+):\d+: error: (.*)")
_HLO_OP = re.compile(r'"?((?:stablehlo|chlo)\.\w+)')


def name_rejected_op(exc: NEFFCompilationError, lowered: LoweredGraph, graph_name: str) -> NEFFCompilationError:
    """The compile error with the op the compiler rejected named first, with what to do; ``exc``
    itself when the compiler's output points at no line of the graph."""
    found = _STDIN_ERROR.search(exc.compiler_log or "")
    if found is None:
        return exc
    line, message = int(found.group(1)), found.group(2).strip()
    text = lowered.hlo.splitlines()
    hlo_op = _HLO_OP.search(text[line - 1]) if 0 < line <= len(text) else None
    origin = lowered.origin_of_line(line)
    what = origin or (hlo_op.group(1) if hlo_op else f"line {line} of the StableHLO")
    if origin and hlo_op:
        what += f", lowered to {hlo_op.group(1)}"
    return NEFFCompilationError(
        f"the compiler rejected {what}: {message}. Run this op eagerly: set "
        "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0 to fall back to eager for this graph, or break the graph "
        "around the op (torch._dynamo.graph_break(), or move it out of the compiled region); `make optable` "
        "regenerates the table of ops the backend breaks on",
        graph_name=graph_name, command=exc.command, compiler_log=exc.compiler_log,
        op=origin.split(" ", 1)[0] if origin else (hlo_op.group(1) if hlo_op else None),
    )


def build_artifact(
    lowered: LoweredGraph,
    compiler_args: Sequence[str],
    *,
    graph_name: str,
    driver: CompilerDriver | None = None,
    key_policy: KeyPolicy = DEFAULT_KEY,
    settings: BuildSettings | None = None,
) -> BuiltArtifact:
    """:func:`build` for one StableHLO module (a :class:`Lowering` of :data:`SINGLE_MODULE`)."""
    return build(Lowering(lowered), compiler_args, graph_name=graph_name, key_policy=key_policy, driver=driver, settings=settings)


def build(
    lowering: Lowering,
    compiler_args: Sequence[str],
    *,
    graph_name: str,
    key_policy: KeyPolicy = DEFAULT_KEY,
    driver: CompilerDriver | None = None,
    settings: BuildSettings | None = None,
) -> BuiltArtifact:
    """The artifact of a :class:`Lowering`: from the cache when present, else compiled (by its
    strategy) and published as one cache entry, whatever the strategy.

    A miss takes the key's compile lock, looks again (another process may have published while
    this one waited), checks the key's failure record, compiles, and publishes; a failed compile is
    recorded under the key. A cache or lock directory that cannot be written does not fail the
    compile: it warns (:class:`~reference.cache.errors.CacheFallbackWarning`) and the artifact is
    used uncached. ``key_policy`` says how the key is made and checked (:class:`KeyPolicy`).
    ``settings`` (a compile request's; ``None``: the environment's now) give the cache, whether a
    miss is an error (``assert_cache_hit``) and store coordination: with ``store_compile`` the
    compile step is coordinated over the process group's c10d store
    (:mod:`reference.spmd.coordination`): one rank compiles, the others fetch.
    """
    settings = _settings(settings)
    key, breakdown = lowering_key(lowering, compiler_args, key_policy=key_policy)
    if key_policy.check is not None:
        key_policy.check(key, compiler_args, graph_name, None)
    cache = neff_cache(settings.cache)
    driver = driver or CompilerDriver()

    def _hit(entry) -> BuiltArtifact:
        if key_policy.check is not None:
            key_policy.check(key, compiler_args, graph_name, entry.metadata.compiler_args)
        METRICS.bump("neff_cache_hits")
        return BuiltArtifact(key, graph_name, entry.artifact, entry.metadata, cache_hit=True)

    def _compile() -> BuiltArtifact:
        if settings.assert_cache_hit:
            raise CacheMissError(graph_name, key)
        METRICS.bump("compiler_invocations")
        try:
            with Heartbeat(lambda s: f"still compiling graph {graph_name} ({s:.0f} s)"):
                result = lowering.strategy.compile(lowering, compiler_args, graph_name=graph_name, driver=driver)
        except NEFFCompilationError as exc:
            if cache is not None:
                try:
                    cache.failures.record(key, graph_name=graph_name, error=exc)
                except OSError as write_exc:
                    log.warning("could not record the failed compile of %s: %s", key, write_exc)
            raise
        meta = build_metadata(lowering.graph, key, breakdown, compiler_args, graph_name)
        meta.compile_time_us = result.wall_us
        meta.extra.update(key_policy.metadata_extra)
        if cache is not None:
            cache.failures.clear(key)
            try:
                meta = cache.put(key, result.artifact, meta).metadata
            except CacheWriteError as exc:
                _fallback("the NEFF cache could not be written", exc, "the compiled artifact is used without being cached")
        return BuiltArtifact(key, graph_name, result.artifact, meta, cache_hit=False)

    def _compile_once_per_world() -> BuiltArtifact:
        # With NEURON_LIBTORCH_STORE_COMPILE, the first rank of the process group to miss compiles
        # and the others fetch its artifact through the c10d store (reference.spmd.coordination).
        coordinator = store_coordinator(settings.store_compile, timeout_s=settings.store_wait_s)
        if coordinator is None:
            return _compile()
        compiled: list[BuiltArtifact] = []

        def compile_here() -> tuple[bytes, str]:
            compiled.append(_compile())
            return compiled[0].artifact, compiled[0].metadata.to_json()

        artifact, metadata, here = coordinator.build(key, graph_name, compile_here)
        if here:
            return compiled[0]
        meta = ArtifactMetadata.from_json(metadata, source=f"the c10d store entry of {key}")
        METRICS.bump("store_fetches")
        if cache is not None:
            try:
                meta = cache.put(key, artifact, meta).metadata
            except CacheWriteError as exc:
                _fallback("the NEFF cache could not be written", exc)
        return BuiltArtifact(key, graph_name, artifact, meta, cache_hit=True)

    if cache is None:
        return _compile_once_per_world()
    entry = cache.get(key, evict=False)  # without the lock: never evict under someone's feet
    if entry is not None:
        return _hit(entry)
    try:
        held = cache.acquire(key, graph_name=graph_name)
    except CacheWriteError as exc:
        _fallback(
            "the compile lock could not be taken", exc,
            "compiling without it (another process may compile the same graph at the same time)",
        )
        cache.failures.check(key, graph_name=graph_name)
        METRICS.bump("neff_cache_misses")
        return _compile_once_per_world()
    with held:
        entry = cache.get(key)  # another process may have published while we waited
        if entry is not None:
            return _hit(entry)
        cache.failures.check(key, graph_name=graph_name)
        METRICS.bump("neff_cache_misses")
        return _compile_once_per_world()


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


# --- load -----------------------------------------------------------------------------------------


def load(
    built: BuiltArtifact, lowering: Lowering, *, resident: Sequence[int] | None = None, driver: str = "auto"
) -> Callable:
    """The built artifact as a callable taking the graph's inputs and returning its outputs (the
    strategy's loader).
    ``resident``: the positions of parameters and buffers (default: AOT Autograd's static inputs
    of the graph being traced); ``driver``: the runtime driver setting (the request's
    ``runtime_driver``; ``"auto"`` picks by the call's size)."""
    return lowering.strategy.load(
        built, lowering, resident=static_input_indices() if resident is None else resident, driver=driver
    )


class CompiledGraph:
    """What a compiling seam hands back to AOT Autograd for one graph. ``hlo`` is the keyed text
    (the debug directory shows it); ``loaded`` is ``None`` in compile-only mode, where outputs
    come from the eager graph."""

    def __init__(
        self, built: BuiltArtifact, loaded: Callable | None, eager: Callable | None, *, hlo: str = "",
        lowering: Lowering | None = None, nones: Sequence[int] = (),
    ) -> None:
        self.built = built
        self.loaded = loaded
        self._eager = eager
        self.key = built.key
        self.graph_name = built.graph_name
        self.hlo = hlo
        self.lowering = lowering
        #: positions of the graph's ``None`` outputs, which the artifact does not return
        self.nones = tuple(nones)

    def __call__(self, *args: torch.Tensor):
        if self.loaded is None:
            METRICS.note_fallback(self.graph_name, "compile-only mode: the outputs come from the eager graph")
            return self._eager(*args)
        METRICS.bump("compiled_runs")  # execution evidence: the compiled path ran
        if self.nones:
            return with_none_outputs(self.loaded(*args), self.nones)
        return self.loaded(*args)


def static_input_indices() -> tuple[int, ...]:
    """Positions of the graph being compiled that hold parameters and buffers (AOT Autograd's
    static inputs), or none outside a trace. The runtime keeps their device buffers between calls;
    a position named here that is not a parameter costs a cached buffer, never a stale result."""
    tc = current_tracing_context()
    meta = getattr(tc, "fw_metadata", None) if tc is not None else None
    return tuple(getattr(meta, "static_input_indices", None) or ())


def compile_aten_graph(
    aten_gm: torch.fx.GraphModule,
    *,
    graph_name: str,
    compiler_args: Sequence[str],
    model_name: str,
    fx_passes_us: int = 0,
    key_policy: KeyPolicy = DEFAULT_KEY,
    settings: BuildSettings | None = None,
) -> CompiledGraph:
    """Lower, key, build (or fetch) and load one ATen graph, recording its metrics once, under
    ``settings`` (a compile request's; ``None``: the environment's now)."""
    settings = _settings(settings)
    lowering = lower(aten_gm, graph_name=graph_name, settings=settings)
    return serve(
        lowering, compiler_args, graph_name=graph_name, model_name=model_name, fx_passes_us=fx_passes_us,
        key_policy=key_policy, eager=aten_gm, nones=none_outputs(aten_gm), settings=settings,
    )


def serve(
    lowering: Lowering,
    compiler_args: Sequence[str],
    *,
    graph_name: str,
    model_name: str,
    fx_passes_us: int = 0,
    key_policy: KeyPolicy = DEFAULT_KEY,
    eager: Callable | None = None,
    resident: Sequence[int] | None = None,
    nones: Sequence[int] = (),
    settings: BuildSettings | None = None,
) -> CompiledGraph:
    """Build (or fetch) and load a lowered graph, recording its metrics once: the tail of
    :func:`compile_aten_graph`, also taken by a graph served from its plan (no ATen graph).
    ``nones``: the positions of the graph's ``None`` outputs, which the artifact does not return
    (:func:`~reference.lowering.stablehlo.none_outputs`). The float64 policy
    (:func:`float64_policy`) is applied before the build; with ``settings.compile_only`` nothing is
    loaded (the outputs come from ``eager``)."""
    settings = _settings(settings)
    float64_policy(lowering.graph, graph_name, settings.float64)
    start = time.perf_counter()
    built = build(lowering, compiler_args, graph_name=graph_name, key_policy=key_policy, settings=settings)
    log.info(
        "graph %s key %s: %s in %.2f s (lowering %.2f s)", graph_name, built.key[:12],
        "cache hit" if built.cache_hit else "compiled (cache miss)", time.perf_counter() - start, lowering.lower_us / 1e6,
    )
    record_graph_metrics(
        built, model_name=model_name, collectives=lowering.strategy.collectives, node_count=lowering.graph.node_count,
        fx_passes_us=fx_passes_us, lower_us=lowering.lower_us,
    )
    loaded = None
    if not settings.compile_only:
        built, loaded = _load_or_rebuild(built, lowering, compiler_args, graph_name=graph_name, key_policy=key_policy,
                                         resident=resident, settings=settings)
    return CompiledGraph(built, loaded, eager, hlo=lowering.graph.hlo, lowering=lowering, nones=nones)


def float64_policy(lowered: LoweredGraph, graph_name: str, policy: str = "narrow") -> None:
    """The reference's float64 precision policy, applied to each graph it serves.

    The compiler computes float64 in float32 (IREE demotes f64 for the CPU, as Neuron's device
    has no float64 units): inputs are narrowed, outputs widened back, so a float64 output has
    float32's precision and range. For a graph with float64 inputs or outputs, by default
    (``NEURON_REFERENCE_FLOAT64=narrow``) that is done with one warning per graph naming them (by
    position); with ``=error`` the graph is refused with
    :class:`~reference.core.errors.PrecisionError` before it is built (``policy``: the request's
    ``float64`` setting). float64 only inside a
    graph with other inputs and outputs (a Python scalar the lowering keeps as an f64 constant, a
    backward graph's) is narrowed without a word: no dtype the user sees claims more than it holds.
    """
    inputs = [str(i) for i, s in enumerate(lowered.input_specs) if s.dtype == "float64"]
    outputs = [str(i) for i, s in enumerate(lowered.output_specs) if s.dtype == "float64"]
    if not inputs and not outputs:
        return
    what = "its float64 " + " and ".join(
        f"{kind} {', '.join(positions)}" for kind, positions in (("inputs", inputs), ("outputs", outputs)) if positions
    )
    if policy == "error":
        raise PrecisionError(
            f"{what} would be computed in float32 (the device has no float64 units), and "
            "NEURON_REFERENCE_FLOAT64=error refuses that; cast the inputs to float32, or unset "
            "NEURON_REFERENCE_FLOAT64 to compute in float32 with a warning",
            graph_name=graph_name,
        )
    warn_user(
        f"neuron backend: graph {graph_name!r}: {what} are computed in float32 (the device has no float64 "
        "units), so float64 results carry float32's precision and range (about 7 significant digits; "
        "beyond 3.4e38 they become inf). Set NEURON_REFERENCE_FLOAT64=error to refuse float64 graphs instead",
        PrecisionWarning,
    )


def _load_or_rebuild(
    built: BuiltArtifact, lowering: Lowering, compiler_args: Sequence[str], *, graph_name: str, key_policy: KeyPolicy,
    resident: Sequence[int] | None, settings: BuildSettings,
) -> tuple[BuiltArtifact, Callable]:
    """Load a built artifact. One served from the cache that the runtime cannot load although its
    checksums match (built for another runtime, or planted) is evicted and rebuilt once; when the
    rebuilt one cannot be loaded either, :class:`UnloadableArtifactError` names the entry."""
    try:
        return built, load(built, lowering, resident=resident, driver=settings.runtime_driver)
    except NEFFExecutionError as exc:
        cache = neff_cache(settings.cache) if built.cache_hit else None
        if cache is None:
            raise
        first = exc
    entry = cache.entry_dir(built.key)
    with cache.lock(built.key, graph_name=graph_name):
        current = cache.get(built.key, evict=False)
        if current is None or current.artifact == built.artifact:  # not re-published meanwhile
            cache.evict(built.key, f"the runtime could not load its artifact ({first})")
    rebuilt = build(lowering, compiler_args, graph_name=graph_name, key_policy=key_policy, settings=settings)
    try:
        return rebuilt, load(rebuilt, lowering, resident=resident, driver=settings.runtime_driver)
    except NEFFExecutionError as exc:
        raise UnloadableArtifactError(graph_name, entry, exc) from exc


# --- stage: the deferred flow -----------------------------------------------------------------------


def stage(
    lowering: Lowering, compiler_args: Sequence[str], *, graph_name: str, directory: str, key_policy: KeyPolicy = DEFAULT_KEY
) -> StagedGraph:
    """Key a lowered graph exactly as :func:`build` would and stage it under ``directory`` for
    ``parallel_compile``, instead of building it: the keyed text, its metadata (with the meshes the
    key hashes in ``extra["replica_groups"]``, when it has any) and the strategy's document."""
    key, breakdown = lowering_key(lowering, compiler_args, key_policy=key_policy)
    extra: dict[str, Any] = {"node_count": lowering.graph.node_count}
    if key_policy.name != DEFAULT_KEY.name:  # recorded only when it is not the default (older entries have none)
        extra["key_policy"] = key_policy.name
    groups = lowering.replica_groups
    if groups is not None:
        extra["replica_groups"] = groups
    meta = dataclasses.replace(
        build_metadata(lowering.graph, key, breakdown, compiler_args, graph_name),
        artifact_file="",
        hlo_file="graph.hlo",
        has_collectives=lowering.strategy.collectives,
        extra=extra,
        stage="captured",
    )
    return write_staged(directory, meta, lowering.graph.hlo, lowering.strategy.document(lowering))


def staged_key_policy(entry: StagedGraph) -> KeyPolicy:
    """The key policy an entry was staged under (entries from before policies were recorded: the
    default)."""
    return KEY_POLICIES.get(str(entry.metadata.extra.get("key_policy", "default")), DEFAULT_KEY)


def staged_lowering(entry: StagedGraph) -> Lowering:
    """A staged entry as a :class:`Lowering` again, ready for :func:`cache_key` and :func:`build`."""
    strategy = SPMD_PROGRAM if entry.metadata.has_collectives else SINGLE_MODULE
    return strategy.from_staged(entry)
