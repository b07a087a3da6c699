"""Artifact metadata: the versioned record written beside every cached artifact.

One JSON document per cache entry (``metadata.json``). A reader accepts every schema version it
knows and rejects a newer one with a clear error; fields added in a later version get their
defaults when an older document is read (``compiler_args`` is ``None`` in entries written before
per-graph arguments were recorded).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA_VERSION = 1


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
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise MetadataError(
                f"{source}: schema_version {version!r} is newer than this reader ({SCHEMA_VERSION}); "
                "upgrade the reference or clear the cache entry"
            )
        known = {f for f in cls.__dataclass_fields__}
        missing = [f for f in ("cache_key", "graph_name") if f not in data]
        if missing:
            raise MetadataError(f"{source}: missing fields {missing}")
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs.setdefault("compiler_args", None)
        kwargs.setdefault("key_components", {})
        kwargs.setdefault("input_specs", [])
        kwargs.setdefault("output_specs", [])
        kwargs.setdefault("versions", {})
        kwargs["schema_version"] = SCHEMA_VERSION
        return cls(**kwargs)
