"""One path for one ATen graph: lower -> key -> build -> load, for every seam and tool.

- **lower** (:func:`lower`): a :class:`LoweringStrategy` follows the graph. A graph without
  collectives is one StableHLO module (:data:`SINGLE_MODULE`); a graph with collectives is an SPMD
  program (:data:`SPMD_PROGRAM`): cut at its collectives (:mod:`reference.spmd.split`), each piece
  lowered like any graph, and the whole program written as one StableHLO module
  (:mod:`reference.lowering.program`). Every StableHLO module is lowered through the HLO cache.
- **key** (:func:`lowering_key`): :func:`~reference.cache.key.create_cache_hash` of the strategy's
  key material (the keyed text, its input specs, a program's meshes), the compiler arguments and
  the tool versions, under the request's :class:`KeyPolicy` (the native seam leaves the arguments out of its
  key and checks they never change for one key).
- **build** (:func:`build`): from the NEFF cache, or compiled by the strategy under the key's lock,
  with the key's failure record, and published (one cache entry, whatever the strategy).
- **load** (:func:`load`): the artifact as a callable (the strategy's loader); an artifact from the
  cache that will not load is evicted and rebuilt once.

A strategy only says what differs between kinds of graphs: how to lower one, what its key hashes,
how to compile the lowered text into one artifact and how to load that artifact. Everything around
those steps (HLO cache, key, lock, failure record, atomic publish, compile coordination over the
store, load-or-rebuild, staging) is this package's and the same for every strategy.

Every step is handed one :class:`BuildContext` (:mod:`~reference.pipeline.context`), made once
from the resolved compile request: the graph's name, the parsed compiler configuration, the key
policy and the settings the seam read, instead of each part as its own keyword.
:func:`compile_aten_graph` runs all four and records the graph's metrics once. The capture seam
stops after the key and stages the graph (:func:`stage`); ``parallel_compile`` picks a staged entry
up again (:func:`staged_lowering`) and builds it. The seams decide *which* arguments and passes
apply; this package does the work that is the same for all of them. docs/request_flow.md shows
where it sits on the way from ``torch.compile`` to a compiled graph.

The package, by step: :mod:`~reference.pipeline.strategies` (the strategies and :func:`lower`),
:mod:`~reference.pipeline.context` (:class:`BuildContext`),
:mod:`~reference.pipeline.artifact_keys` (:func:`lowering_key`; :class:`KeyPolicy` comes from the request),
:mod:`~reference.pipeline.building` (:func:`build`), :mod:`~reference.pipeline.serving`
(:func:`load`, :func:`compile_aten_graph`, :func:`serve`) and :mod:`~reference.pipeline.deferred`
(:func:`stage`, :func:`staged_lowering`). Import from the package: the names below are its interface.
"""

from __future__ import annotations

from reference.pipeline.context import BuildContext
from reference.pipeline.building import build, build_artifact, neff_cache, record_graph_metrics
from reference.pipeline.artifact_keys import (
    DEFAULT_KEY, KEY_POLICIES, NATIVE_KEY, KeyPolicy, build_metadata, cache_key, lowering_key,
)
from reference.pipeline.strategies import (
    SINGLE_MODULE, SPMD_PROGRAM, BuiltArtifact, KeyMaterial, Lowering, LoweringStrategy, has_collectives, lower, lower_cached,
    pass_identity, strategy_for,
)
from reference.pipeline.serving import CompiledGraph, compile_aten_graph, float64_policy, load, serve, static_input_indices
from reference.pipeline.deferred import stage, staged_context, staged_key_policy, staged_lowering

__all__ = [
    "BuildContext", "BuiltArtifact", "CompiledGraph", "DEFAULT_KEY", "KEY_POLICIES", "KeyMaterial", "KeyPolicy", "Lowering",
    "LoweringStrategy", "NATIVE_KEY", "SINGLE_MODULE", "SPMD_PROGRAM", "build", "build_artifact", "build_metadata",
    "cache_key", "compile_aten_graph", "float64_policy", "has_collectives", "load", "lower", "lower_cached",
    "lowering_key", "neff_cache", "pass_identity", "record_graph_metrics", "serve", "stage", "staged_context", "staged_key_policy",
    "staged_lowering", "static_input_indices", "strategy_for",
]
