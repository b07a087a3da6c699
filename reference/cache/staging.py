"""The staging store: graphs captured for the deferred flow, waiting for ``parallel_compile``.

One directory per cache key under the capture directory: ``graph.hlo`` (the keyed text),
``metadata.json`` (:class:`~reference.core.schema.ArtifactMetadata`, ``stage="captured"``) and,
when the graph's lowering strategy keeps one, ``lowering.json``: the strategy's document of what
a build needs beyond the keyed text (an SPMD program's pieces and steps), so the graph can be built
in another process without it. An entry is published whole (a temporary
directory renamed into place): a reader sees no entry or a complete one. The store takes and
returns data; the key and the metadata come from the pipeline.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass
from typing import Any

from reference.cache.records import RecordRejected, confined, read_regular
from reference.core.schema import ArtifactMetadata, MetadataError
from reference.core.specs import LoweredGraph, TensorSpec

HLO_FILE = "graph.hlo"
METADATA_FILE = "metadata.json"
DOCUMENT_FILE = "lowering.json"
_OLD_PROGRAM_FILE = "program.json"  # what entries staged before lowering.json kept; refused with a reason


@dataclass(frozen=True)
class StagedGraph:
    """One staged entry, as ``parallel_compile`` reads it back. ``document`` is the lowering
    strategy's document (``None`` where the strategy keeps none)."""

    key: str
    path: str
    metadata: ArtifactMetadata
    hlo: str
    document: dict[str, Any] | None = None

    @property
    def graph_name(self) -> str:
        return self.metadata.graph_name

    def lowered(self) -> LoweredGraph:
        return LoweredGraph(
            self.hlo,
            tuple(TensorSpec.from_json(s) for s in self.metadata.input_specs),
            tuple(TensorSpec.from_json(s) for s in self.metadata.output_specs),
            int(self.metadata.extra.get("node_count", 0)),
        )


def write_staged(directory: str, meta: ArtifactMetadata, text: str, document: dict[str, Any] | None = None) -> StagedGraph:
    """Publish one entry under ``<directory>/<meta.cache_key>`` unless it is there already (the
    same key means the same content) and return it."""
    directory = os.path.abspath(directory)
    key = meta.cache_key
    final = os.path.join(directory, key)
    if not os.path.isfile(os.path.join(final, METADATA_FILE)):
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".tmp-{key}-{uuid.uuid4().hex}")
        os.makedirs(tmp)
        try:
            with open(os.path.join(tmp, HLO_FILE), "w", encoding="utf-8") as fh:
                fh.write(text)
            if document is not None:
                with open(os.path.join(tmp, DOCUMENT_FILE), "w", encoding="utf-8") as fh:
                    json.dump(document, fh, sort_keys=True)
            with open(os.path.join(tmp, METADATA_FILE), "w", encoding="utf-8") as fh:
                fh.write(meta.to_json())
            try:
                os.rename(tmp, final)
            except OSError:
                pass  # published by someone else meanwhile: same key, same content
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return StagedGraph(key, final, meta, text, document)


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
        if name.startswith(".") or os.path.islink(path) or not os.path.isdir(path):
            continue  # a temporary directory, or something that is not an entry of this store
        try:
            raw = read_regular(meta_path)
        except RecordRejected as why:
            raise MetadataError(f"{meta_path}: {why}") from None
        if raw is None:
            continue
        try:
            meta = ArtifactMetadata.from_json(raw.decode("utf-8"), source=meta_path)
        except UnicodeDecodeError:
            raise MetadataError(f"{meta_path}: not UTF-8 text") from None
        if meta.stage != "captured":
            continue
        # file names read from the record never leave the entry's folder (RecordPathError)
        hlo_path = confined(path, meta.hlo_file or HLO_FILE, record=meta_path, field="hlo_file")
        document_path = os.path.join(path, DOCUMENT_FILE)
        if not os.path.lexists(document_path) and os.path.lexists(os.path.join(path, _OLD_PROGRAM_FILE)):
            raise MetadataError(
                f"{path}: staged by an older reference ({_OLD_PROGRAM_FILE}, before SPMD programs became a "
                f"lowering strategy with {DOCUMENT_FILE}); capture the graph again (or remove the entry)"
            )
        try:
            hlo_raw = read_regular(hlo_path)
            if hlo_raw is None:
                raise RecordRejected("it is missing")
            hlo = hlo_raw.decode("utf-8")
            document = None
            document_raw = read_regular(document_path)
            if document_raw is not None:
                document = json.loads(document_raw.decode("utf-8"))
                if not isinstance(document, dict):
                    raise RecordRejected(f"{DOCUMENT_FILE} is not a JSON object")
        except (RecordRejected, UnicodeDecodeError, ValueError) as exc:
            # the reason only: a staged file's content is never repeated in an error
            why = exc if isinstance(exc, RecordRejected) else type(exc).__name__
            raise MetadataError(f"{meta_path}: its staged files cannot be read ({why})") from None
        out.append(StagedGraph(meta.cache_key, path, meta, hlo, document))
    return out
