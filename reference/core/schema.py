"""Artifact metadata: the versioned record written beside every cached or staged graph.

One JSON document per entry (``metadata.json``), in two places:

* a NEFF cache entry (``<neff cache>/<key>/``): the compiled artifact and how it was built;
* a staged entry written by the capture seam (``<capture dir>/<key>/``): the StableHLO of a graph
  that is not compiled yet, with the compiler arguments resolved for it, so that
  ``parallel_compile`` builds it later with exactly those arguments.

Schema history (a reader accepts every version it knows and rejects a newer one):

====  ==========================================================================================
v0    no ``schema_version`` field; no ``compiler_args`` (entries written before per-graph
      arguments existed). Read with ``compiler_args=None``: the reader applies the base arguments.
v1    ``compiler_args``: the resolved argument list the graph was (or is to be) compiled with.
v2    ``stage``: ``"compiled"`` (a NEFF cache entry) or ``"captured"`` (staged HLO, no artifact);
      a v0/v1 document is read as ``"compiled"`` unless it names an ``hlo_file`` and no artifact.
====  ==========================================================================================
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA_VERSION = 2
STAGES = ("compiled", "captured")


class MetadataError(ValueError):
    """A metadata document that cannot be read (corrupt, or from a newer schema)."""


@dataclass
class ArtifactMetadata:
    cache_key: str
    graph_name: str
    compiler_args: list[str] | None
    key_components: dict[str, Any]
    input_specs: list[dict[str, Any]]
    output_specs: list[dict[str, Any]]
    versions: dict[str, str]
    artifact_file: str = "model.neff"
    artifact_size: int = 0
    artifact_sha256: str = ""
    compile_time_us: int = 0
    hlo_file: str | None = None
    has_collectives: bool = False
    rank: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    stage: str = "compiled"
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, *, source: str = "metadata") -> "ArtifactMetadata":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise MetadataError(f"{source}: not valid JSON ({exc})") from None
        if not isinstance(data, dict):
            raise MetadataError(f"{source}: expected a JSON object")
        version = data.get("schema_version", 0)
        if not isinstance(version, int) or isinstance(version, bool) or version < 0 or version > SCHEMA_VERSION:
            raise MetadataError(
                f"{source}: schema_version {version!r} is not one this reader knows (0..{SCHEMA_VERSION}); "
                "upgrade the reference or clear the entry"
            )
        known = {f for f in cls.__dataclass_fields__}
        missing = [f for f in ("cache_key", "graph_name") if f not in data]
        if missing:
            raise MetadataError(f"{source}: missing fields {missing}")
        kwargs = {k: v for k, v in data.items() if k in known}
        if version < 1:
            kwargs["compiler_args"] = None  # v0 recorded no arguments, whatever the document holds
        args = kwargs.get("compiler_args")
        if args is not None and (not isinstance(args, list) or not all(isinstance(a, str) for a in args)):
            raise MetadataError(f"{source}: compiler_args must be a list of strings or null, got {args!r}")
        kwargs.setdefault("compiler_args", None)
        kwargs.setdefault("key_components", {})
        kwargs.setdefault("input_specs", [])
        kwargs.setdefault("output_specs", [])
        kwargs.setdefault("versions", {})
        if version < 2:
            staged = kwargs.get("hlo_file") and not kwargs.get("artifact_size")
            kwargs["stage"] = "captured" if staged else "compiled"
        if kwargs.get("stage") not in STAGES:
            raise MetadataError(f"{source}: stage {kwargs.get('stage')!r} is not one of {STAGES}")
        kwargs["schema_version"] = SCHEMA_VERSION
        return cls(**kwargs)
