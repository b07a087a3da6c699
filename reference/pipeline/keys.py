"""The key of a lowering: :func:`lowering_key` under a :class:`KeyPolicy`, and the metadata
published beside the artifact."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from reference.cache.key import create_cache_hash, tool_versions
from reference.core.schema import ArtifactMetadata
from reference.core.specs import LoweredGraph
from reference.pipeline.lowering import Lowering


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
