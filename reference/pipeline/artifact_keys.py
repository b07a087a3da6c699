"""The key of a lowering: :func:`lowering_key` under a
:class:`~reference.compiler.request.KeyPolicy` (the request's), and the metadata published beside
the artifact."""

from __future__ import annotations

from reference.cache.key import config_cache_hash, tool_versions
from reference.compiler.driver import CompilerConfig
from reference.compiler.request import DEFAULT_KEY, KEY_POLICIES, NATIVE_KEY, KeyPolicy
from reference.core.schema import ArtifactMetadata
from reference.core.specs import LoweredGraph
from reference.pipeline.strategies import Lowering


__all__ = ["DEFAULT_KEY", "KEY_POLICIES", "NATIVE_KEY", "KeyPolicy", "build_metadata", "cache_key", "lowering_key"]


def cache_key(
    lowered: LoweredGraph, config: CompilerConfig, *, replica_groups=None, key_policy: KeyPolicy = DEFAULT_KEY,
    hlo_normalizer=None,
) -> tuple[str, dict]:
    """The artifact key of a lowered graph and its breakdown (the one place a seam's key is made)."""
    return config_cache_hash(
        lowered.hlo, config if key_policy.compiler_args_in_key else None, lowered.input_specs, breakdown=True,
        replica_groups=replica_groups, hlo_normalizer=hlo_normalizer,
    )


def lowering_key(lowering: Lowering, config: CompilerConfig, key_policy: KeyPolicy = DEFAULT_KEY) -> tuple[str, dict]:
    """The artifact key of a :class:`Lowering` (its strategy's key material) and its breakdown."""
    material = lowering.strategy.key_material(lowering)
    return cache_key(material.graph, config, replica_groups=material.replica_groups, key_policy=key_policy)


def build_metadata(lowered: LoweredGraph, key: str, breakdown: dict, config: CompilerConfig, graph_name: str) -> ArtifactMetadata:
    return ArtifactMetadata(
        cache_key=key,
        graph_name=graph_name,
        compiler_args=list(config.args),
        key_components=breakdown["components"],
        input_specs=[s.as_json() for s in lowered.input_specs],
        output_specs=[s.as_json() for s in lowered.output_specs],
        versions=dict(tool_versions()),
    )
