"""The capture seam: ``torch.compile(model, backend="neuron_libtorch_graph_capture")``.

It resolves the options exactly like the in-process seam (scope first, then the platform
arguments), runs the FX passes and lowers every graph, computes the same cache key with
:func:`reference.cache.key.create_cache_hash`, and then stops: instead of compiling, it stages the
graph in the capture directory: ``<dir>/<key>/graph.hlo`` and ``<dir>/<key>/metadata.json``
(:class:`~reference.core.schema.ArtifactMetadata`, ``stage="captured"``) recording the resolved
``compiler_args``. ``parallel_compile`` builds the staged graphs later, many at once, and publishes
them into the NEFF cache under that key, so a later in-process compile with the same arguments is a
cache hit. The graph itself runs eagerly, so the traced model still returns real outputs.

The capture directory is the one opened with :func:`capture_to` (``parallel_trace`` opens it in
each child), else ``<TORCH_NEURONX_HLO_CACHE_DIR>/captured``.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import shutil
import threading
import uuid
import dataclasses
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import torch

from reference.cache.key import create_cache_hash
from reference.core import env
from reference.backends.neuron import compile_fx_graph
from reference.core.specs import TensorSpec
from reference.lowering.stablehlo import LoweredGraph, lower_to_stablehlo
from reference.pipeline import build_metadata, has_collectives
from reference.core.schema import ArtifactMetadata, MetadataError

HLO_FILE = "graph.hlo"
METADATA_FILE = "metadata.json"

_capture_dir: contextvars.ContextVar[str | None] = contextvars.ContextVar("neuron_capture_dir", default=None)


@contextlib.contextmanager
def capture_to(path: str | os.PathLike) -> Iterator[str]:
    """Stage the graphs captured in this block under ``path``."""
    token = _capture_dir.set(os.path.abspath(os.fspath(path)))
    try:
        yield _capture_dir.get()
    finally:
        _capture_dir.reset(token)


def capture_dir() -> str:
    return _capture_dir.get() or os.path.join(env.get(env.HLO_CACHE_DIR), "captured")


@dataclass(frozen=True)
class StagedGraph:
    """One staged entry, as ``parallel_compile`` reads it back."""

    key: str
    path: str
    metadata: ArtifactMetadata
    hlo: str

    @property
    def graph_name(self) -> str:
        return self.metadata.graph_name

    def lowered(self) -> LoweredGraph:
        def spec(d: Mapping[str, Any]) -> TensorSpec:
            return TensorSpec(str(d["dtype"]), tuple(d["shape"]), tuple(d.get("stride", ())))

        return LoweredGraph(
            self.hlo,
            tuple(spec(s) for s in self.metadata.input_specs),
            tuple(spec(s) for s in self.metadata.output_specs),
            int(self.metadata.extra.get("node_count", 0)),
        )


class CaptureLog:
    """The entries this process staged, in order (``parallel_trace`` reports them per job)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[dict[str, Any]] = []

    def add(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._entries.append(entry)

    def entries(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


CAPTURES = CaptureLog()


def stage_graph(
    lowered: LoweredGraph,
    compiler_args: Sequence[str],
    *,
    graph_name: str,
    directory: str | None = None,
    has_collectives: bool = False,
) -> StagedGraph:
    """Write one staged entry atomically (a reader sees no entry or a whole one) and return it."""
    directory = os.path.abspath(directory or capture_dir())
    key, breakdown = create_cache_hash(lowered.hlo, compiler_args, lowered.input_specs, breakdown=True)
    meta = dataclasses.replace(
        build_metadata(lowered, key, breakdown, compiler_args, graph_name),
        artifact_file="",
        hlo_file=HLO_FILE,
        has_collectives=has_collectives,
        extra={"node_count": lowered.node_count},
        stage="captured",
    )
    final = os.path.join(directory, key)
    if not os.path.isfile(os.path.join(final, METADATA_FILE)):
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".tmp-{key}-{uuid.uuid4().hex}")
        os.makedirs(tmp)
        try:
            with open(os.path.join(tmp, HLO_FILE), "w", encoding="utf-8") as fh:
                fh.write(lowered.hlo)
            with open(os.path.join(tmp, METADATA_FILE), "w", encoding="utf-8") as fh:
                fh.write(meta.to_json())
            try:
                os.rename(tmp, final)
            except OSError:
                pass  # the same graph with the same arguments was staged by someone else: same content
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    _mark_rank(final)
    staged = StagedGraph(key, final, meta, lowered.hlo)
    CAPTURES.add({"key": key, "graph_name": graph_name, "compiler_args": list(compiler_args), "directory": directory})
    return staged


def _mark_rank(entry_dir: str) -> None:
    """In a multi-rank run, record which rank staged this entry, for the single-artifact check."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        from reference.spmd.guards import mark_staged_rank

        mark_staged_rank(entry_dir, dist.get_rank())


def read_staged(directory: str | os.PathLike) -> list[StagedGraph]:
    """Every staged entry under ``directory``, sorted by key; entries of any known schema version.

    Raises :class:`MetadataError` naming the file for a document that cannot be read.
    """
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        return []
    out: list[StagedGraph] = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        meta_path = os.path.join(path, METADATA_FILE)
        if name.startswith(".") or not os.path.isfile(meta_path):
            continue
        with open(meta_path, encoding="utf-8") as fh:
            meta = ArtifactMetadata.from_json(fh.read(), source=meta_path)
        if meta.stage != "captured":
            continue
        hlo_path = os.path.join(path, meta.hlo_file or HLO_FILE)
        try:
            with open(hlo_path, encoding="utf-8") as fh:
                hlo = fh.read()
        except OSError as exc:
            raise MetadataError(f"{meta_path}: its HLO file cannot be read ({exc})") from None
        out.append(StagedGraph(meta.cache_key, path, meta, hlo))
    return out


def capture_backend(gm: torch.fx.GraphModule, example_inputs: list, options: Mapping[str, Any] | None = None, mode: str | None = None):
    """``backend="neuron_libtorch_graph_capture"``: lower and stage every graph; run it eagerly."""

    def handler(aten_gm, *, graph_name, compiler_args, **_):
        lowered = lower_to_stablehlo(aten_gm, graph_name=graph_name)
        stage_graph(lowered, compiler_args, graph_name=graph_name, has_collectives=has_collectives(aten_gm))
        return aten_gm

    return compile_fx_graph(gm, example_inputs, options, seam="neuron_libtorch_graph_capture", handler=handler)
