"""The native seam: ``torch.compile(model, backend="neuron_native_lite")``.

It differs from the in-process seam in one way that matters here: its artifact cache keys on the
graph's structure and I/O shapes only (the StableHLO and the input specs), not on the compiler
arguments. Two argument sets for one graph would therefore share one cache entry, and whichever
compiled first would silently serve both. :func:`_assert_cache_key_args` refuses that: it raises
:class:`CompilerArgsConflictError` when one key is compiled with two different argument sets, both
within a process (a registry of the arguments each key was built with) and across processes (the
arguments recorded in the cache entry's metadata). A nondeterministic model policy is caught here.

Like every seam it enters through :func:`reference.backends.compile_entry.compile_fx_graph`, whose compile
request applies the scope before the platform arguments and before the key.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Mapping, Sequence

import torch

from reference.backends.compile_entry import compile_fx_graph, opt_into_graph_breaks
from reference.backends.seam import Seam, serve_graph
from reference.compiler.driver import CompilerConfig, parse_compiler_args
from reference.core.errors import NeuronBackendError
from reference.pipeline import NATIVE_KEY


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

    def check_and_record(self, key: str, config: CompilerConfig, graph_name: str) -> None:
        with self._lock:
            seen = self._args.get(key)
            if seen is None:
                self._args[key] = config.pairs
                self._raw[key] = list(config.args)
                return
            first = self._raw[key]
        if seen != config.pairs:
            raise CompilerArgsConflictError(key, graph_name, first, config.args, "earlier in this process")

    def reset(self) -> None:
        with self._lock:
            self._args.clear()
            self._raw.clear()


_REGISTRY = _KeyArgsRegistry()


def reset_native_key_registry() -> None:
    """Forget the arguments recorded per key (a new serving session, or between tests)."""
    _REGISTRY.reset()


def _assert_cache_key_args(
    key: str, config: CompilerConfig, *, graph_name: str, recorded: Sequence[str] | None = None
) -> None:
    """Raise :class:`CompilerArgsConflictError` if ``key`` was built with other arguments than
    ``config``'s (the same flags in another spelling are the same arguments).

    ``recorded`` is the list an existing cache entry was built with (``None``: unknown).
    """
    if recorded is not None and tuple(parse_compiler_args(list(recorded))) != config.pairs:
        raise CompilerArgsConflictError(key, graph_name, recorded, config.args, "recorded in the cache entry")
    _REGISTRY.check_and_record(key, config, graph_name)


def _check_key_args(key: str, config: CompilerConfig, graph_name: str, recorded: Sequence[str] | None) -> None:
    _assert_cache_key_args(key, config, graph_name=graph_name, recorded=recorded)


#: The pipeline's native key policy with this seam's check of the arguments each key was built with.
NATIVE_KEY_CHECKED = dataclasses.replace(NATIVE_KEY, check=_check_key_args)

#: ``backend="neuron_native_lite"``: served in-process under the structure-and-shape key. It takes
#: the backend's forced graph breaks like ``neuron`` (an op with no lowering fails here the same
#: way). Inference plans are the neuron seam's: a plan is found by the graph alone and served under
#: the default key, which would bypass this seam's key and its check of the arguments.
NATIVE_SEAM = Seam(
    "neuron_native_lite", "serve", serve_graph, key_policy=NATIVE_KEY_CHECKED, graph_breaks=True,
    plans=False, no_plans_because="a plan is served under the default key; this seam keys on structure and shapes "
    "and checks the arguments of each key",
)


@opt_into_graph_breaks
def native_backend(gm: torch.fx.GraphModule, example_inputs: list, options: Mapping[str, Any] | None = None, mode: str | None = None):
    """``backend="neuron_native_lite"``: compile in-process under the structure-and-shape key."""
    return compile_fx_graph(gm, example_inputs, options, seam=NATIVE_SEAM)
