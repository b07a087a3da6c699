"""Lowering: the strategies that say how each kind of graph is lowered, keyed, compiled and loaded,
and :func:`lower`, which picks one by the graph's content and lowers through the HLO cache."""

from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import torch

from reference.cache.hlo_cache import PASS_IDENTITY_META, create_hlo_cache_key, hlo_cache
from reference.cache.staging import StagedGraph
from reference.compiler.driver import CompileResult, CompilerConfig, CompilerDriver
from reference.core.build_settings import BuildSettings, CacheRoots
from reference.core.errors import NEFFCompilationError
from reference.core.metrics import METRICS
from reference.core.schema import ArtifactMetadata, MetadataError
from reference.core.specs import LoweredGraph
from reference.fx_passes import get_default_pass_manager
from reference.lowering.cost import estimate_flops
from reference.lowering.program import LoweredProgram, program_text
from reference.lowering.stablehlo import input_specs, lower_to_stablehlo, lowering_fingerprint, output_specs
from reference.runtime import LoadedArtifact, LoadedProgram, pack_bundle
from reference.spmd.collectives import has_collectives
from reference.spmd.mesh import MESH_REGISTRY
from reference.spmd.split import split_at_collectives


@dataclass
class BuiltArtifact:
    """What a build gives (:func:`~reference.pipeline.build`) and a strategy loads: the artifact under
    its key, with the metadata published beside it."""

    key: str
    graph_name: str
    artifact: bytes
    metadata: ArtifactMetadata
    cache_hit: bool


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
        self, lowering: "Lowering", config: CompilerConfig, *, graph_name: str, driver: CompilerDriver
    ) -> CompileResult: ...

    def load(self, built: BuiltArtifact, lowering: "Lowering", *, resident: Sequence[int], driver: str) -> Callable: ...

    def document(self, lowering: "Lowering") -> dict[str, Any] | None: ...

    def from_staged(self, entry: StagedGraph) -> "Lowering": ...


def _compile_module(
    driver: CompilerDriver, lowered: LoweredGraph, config: CompilerConfig, *, graph_name: str
) -> CompileResult:
    """One StableHLO module through the compiler driver; a rejected op is named
    (:func:`name_rejected_op`)."""
    try:
        return driver.compile(lowered.hlo, config, graph_name=graph_name)
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

    def compile(self, lowering, config, *, graph_name, driver) -> CompileResult:
        return _compile_module(driver, lowering.graph, config, graph_name=graph_name)

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

    def compile(self, lowering, config, *, graph_name, driver) -> CompileResult:
        program: LoweredProgram = lowering.detail
        start = time.perf_counter()
        results = []
        for i, piece in enumerate(program.pieces):
            METRICS.bump("spmd_piece_compiles")
            results.append(_compile_module(driver, piece, config, graph_name=f"{graph_name}_piece{i}"))
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


def lower_cached(aten_gm: torch.fx.GraphModule, *, graph_name: str, settings: BuildSettings) -> LoweredGraph:
    """``lower_to_stablehlo`` through the HLO cache of ``settings`` (none when caching is off)."""
    return _lower_keyed(aten_gm, graph_name=graph_name, cache=settings.cache)[0]


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


def lower(aten_gm: torch.fx.GraphModule, *, graph_name: str, settings: BuildSettings) -> Lowering:
    """Lower one ATen graph under the strategy its content asks for (:func:`strategy_for`),
    through the HLO cache of ``settings`` (a compile request's)."""
    start = time.perf_counter()
    lowering = strategy_for(aten_gm).lower(aten_gm, graph_name=graph_name, cache=settings.cache)
    return dataclasses.replace(lowering, lower_us=int((time.perf_counter() - start) * 1e6))
