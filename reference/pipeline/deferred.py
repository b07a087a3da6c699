"""The deferred flow's half of the pipeline: a lowered graph staged under its key (:func:`stage`)
and picked up again by ``parallel_compile`` (:func:`staged_lowering`, :func:`staged_context`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from reference.cache.staging import StagedGraph, write_staged
from reference.compiler.driver import CompilerConfig
from reference.core.build_settings import BuildSettings
from reference.pipeline.context import BuildContext
from reference.pipeline.artifact_keys import DEFAULT_KEY, KEY_POLICIES, KeyPolicy, build_metadata, lowering_key
from reference.pipeline.strategies import SINGLE_MODULE, SPMD_PROGRAM, Lowering


def stage(lowering: Lowering, ctx: BuildContext, directory: str) -> StagedGraph:
    """Key a lowered graph exactly as :func:`build` would and stage it under ``directory`` for
    ``parallel_compile``, instead of building it: the keyed text, its metadata (with the meshes the
    key hashes in ``extra["replica_groups"]``, when it has any) and the strategy's document."""
    key_policy = ctx.key_policy
    key, breakdown = lowering_key(lowering, ctx.config, key_policy)
    extra: dict[str, Any] = {"node_count": lowering.graph.node_count}
    if key_policy.name != DEFAULT_KEY.name:  # recorded only when it is not the default (older entries have none)
        extra["key_policy"] = key_policy.name
    groups = lowering.replica_groups
    if groups is not None:
        extra["replica_groups"] = groups
    meta = dataclasses.replace(
        build_metadata(lowering.graph, key, breakdown, ctx.config, ctx.graph_name),
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


def staged_context(entry: StagedGraph, config: CompilerConfig, settings: BuildSettings) -> BuildContext:
    """The context ``parallel_compile`` builds a staged entry under: its graph name and key policy,
    the configuration it resolved for the entry, and its settings."""
    return BuildContext(entry.graph_name, config, settings, staged_key_policy(entry))


def staged_lowering(entry: StagedGraph) -> Lowering:
    """A staged entry as a :class:`Lowering` again, ready for :func:`cache_key` and :func:`build`."""
    strategy = SPMD_PROGRAM if entry.metadata.has_collectives else SINGLE_MODULE
    return strategy.from_staged(entry)
