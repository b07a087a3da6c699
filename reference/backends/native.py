"""The native seam: ``torch.compile(model, backend="neuron_native_lite")``.

It differs from the in-process seam in one way that matters here: its artifact cache keys on the
graph's structure and I/O shapes only (the StableHLO and the input specs), not on the compiler
arguments. Two argument sets for one graph would therefore share one cache entry, and whichever
compiled first would silently serve both. :func:`_assert_cache_key_args` refuses that: it raises
:class:`CompilerArgsConflictError` when one key is compiled with two different argument sets, both
within a process (a registry of the arguments each key was built with) and across processes (the
arguments recorded in the cache entry's metadata). A nondeterministic model policy is caught here.

Like every seam it calls ``apply_scoped_compiler_args`` before the platform arguments and before
the key (through :func:`reference.backends.neuron.compile_fx_graph`).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Mapping, Sequence

import torch

from reference.cache.key import create_cache_hash
from reference.core import env
from reference.backends.neuron import compile_fx_graph
from reference.compiler.driver import parse_compiler_args
from reference.core.errors import NeuronBackendError
from reference.lowering.stablehlo import lower_to_stablehlo
from reference.pipeline import CompiledGraph, build_artifact, has_collectives, record_graph_metrics
from reference.runtime import LoadedArtifact


class CompilerArgsConflictError(NeuronBackendError, ValueError):
    """One native cache key compiled with two different compiler-argument sets."""

    def __init__(self, key: str, graph_name: str, first: Sequence[str], second: Sequence[str], where: str) -> None:
        super().__init__(
            f"graph {graph_name!r}: native cache key {key} was built with compiler arguments {list(first)} "
            f"({where}) and is now requested with {list(second)}; the native cache keys on graph structure "
            "and shapes only, so the arguments of one graph must not change. Make the model's "
            "compiler_args_for deterministic and resolve the graph type at every compile site."
        )
        self.key = key
        self.graph_name = graph_name
        self.first = list(first)
        self.second = list(second)


class _KeyArgsRegistry:
    """The argument set each native key was built with in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._args: dict[str, tuple[tuple[str, str | None], ...]] = {}
        self._raw: dict[str, list[str]] = {}

    def check_and_record(self, key: str, args: Sequence[str], graph_name: str) -> None:
        canon = tuple(parse_compiler_args(list(args)))
        with self._lock:
            seen = self._args.get(key)
            if seen is None:
                self._args[key] = canon
                self._raw[key] = list(args)
                return
            first = self._raw[key]
        if seen != canon:
            raise CompilerArgsConflictError(key, graph_name, first, args, "earlier in this process")

    def reset(self) -> None:
        with self._lock:
            self._args.clear()
            self._raw.clear()


_REGISTRY = _KeyArgsRegistry()


def reset_native_key_registry() -> None:
    """Forget the arguments recorded per key (a new serving session, or between tests)."""
    _REGISTRY.reset()


def native_cache_key(lowered) -> str:
    """The native key: structure and I/O shapes only (no compiler arguments)."""
    return create_cache_hash(lowered.hlo, None, lowered.input_specs)


def _assert_cache_key_args(key: str, compiler_args: Sequence[str], *, graph_name: str, recorded: Sequence[str] | None = None) -> None:
    """Raise :class:`CompilerArgsConflictError` if ``key`` was built with other arguments.

    ``recorded`` is the list an existing cache entry was built with (``None``: unknown).
    """
    if recorded is not None and tuple(parse_compiler_args(list(recorded))) != tuple(parse_compiler_args(list(compiler_args))):
        raise CompilerArgsConflictError(key, graph_name, recorded, compiler_args, "recorded in the cache entry")
    _REGISTRY.check_and_record(key, compiler_args, graph_name)


def _build_native(aten_gm, *, graph_name: str, compiler_args: Sequence[str], model_name: str, fx_passes_us: int = 0):
    start = time.perf_counter()
    lowered = lower_to_stablehlo(aten_gm, graph_name=graph_name)
    lower_us = int((time.perf_counter() - start) * 1e6)
    key = native_cache_key(lowered)
    _assert_cache_key_args(key, compiler_args, graph_name=graph_name)

    def check_recorded(entry) -> None:  # an entry another process built with other arguments
        _assert_cache_key_args(key, compiler_args, graph_name=graph_name, recorded=entry.metadata.compiler_args)

    # The shared build path (locks, failure records, fallbacks), under the native key.
    built = build_artifact(
        lowered, compiler_args, graph_name=graph_name, compiler_args_in_key=False,
        check_entry=check_recorded, metadata_extra={"seam": "neuron_native_lite"},
    )
    record_graph_metrics(
        built, model_name=model_name, collectives=has_collectives(aten_gm), node_count=lowered.node_count,
        fx_passes_us=fx_passes_us, lower_us=lower_us,
    )
    if env.get(env.COMPILE_ONLY):
        return CompiledGraph(built, None, aten_gm)
    loaded = LoadedArtifact(built.artifact, graph_name=graph_name, input_specs=lowered.input_specs, output_specs=lowered.output_specs)
    return CompiledGraph(built, loaded, aten_gm)


def native_backend(gm: torch.fx.GraphModule, example_inputs: list, options: Mapping[str, Any] | None = None, mode: str | None = None):
    """``backend="neuron_native_lite"``: compile in-process under the structure-and-shape key."""
    return compile_fx_graph(gm, example_inputs, options, seam="neuron_native_lite", handler=_build_native)
