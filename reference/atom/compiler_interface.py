"""The compilers that compile one piece: the interface and its three adaptors.

A compiler turns a piece (an FX graph plus example inputs) into a callable and a *handle*: a plain
Python value (strings, ints, tuples, dicts of those) that :class:`~reference.atom.vllm_backend.
CompilerManager` writes into its map file and hands back to :meth:`CompilerInterface.load` in a
later process. ``runtime_shape=None`` asks for one callable for every batch size (the example
inputs carry a symbolic batch size); an int asks for a callable specialised to that size.

* :class:`InductorStandaloneAdaptor`: ``torch._inductor.standalone_compile``; the artifact is saved
  unpacked under the cache directory and loaded with ``CompiledArtifact.load``.
* :class:`InductorAdaptor`: ``compile_fx`` with Inductor's FX graph cache; a piece compiled for one
  concrete size gets ``max_autotune`` and ``coordinate_descent_tuning`` (:func:`inductor_patches`). Inductor only caches
  under Dynamo's tracing context, so while compiling and loading, four Inductor internals are
  patched: the graph-hash function (to read the key), the inner compile (to read the key on a cache
  hit too), the shape-environment lookup (an environment whose guards always hold) and the
  cacheability check (always cacheable). The patches live in a ``with`` block and are undone on exit.
* :class:`ReferenceAdaptor`: the reference backend's compile path (the neuron seam's
  ``compile_fx_graph``): StableHLO through torch-mlir, the IREE compiler, the NEFF cache, the
  compiler-args scope. A piece is a :class:`~reference.atom.reference_piece.ReferencePiece`: one
  artifact per concrete size, its weights resident in the runtime, a thin call per step. Its
  handle is the compiler argument list the piece was compiled with; loading builds the same piece,
  which finds the lowered and compiled artifacts in the HLO and NEFF caches.

Inductor is imported where it is used (it is heavy and optional for the reference adaptor).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import os
from typing import Any, Callable, Optional
from unittest import mock

import torch
import torch.fx as fx

from reference import NeuronBackendError
from reference.cache.key import tool_versions
from reference.compiler.scope import current_scoped_compiler_args
from reference.core import env
from reference.core.torch_compat import functorch_config, inductor_module

__all__ = [
    "CompilerInterface",
    "AlwaysHitShapeEnv",
    "InductorStandaloneAdaptor",
    "InductorAdaptor",
    "ReferenceAdaptor",
    "CompileCacheLoadError",
    "make_compiler",
]


class CompileCacheLoadError(NeuronBackendError):
    """A handle that no longer loads (artifact missing or unreadable); the caller recompiles."""


class CompilerInterface:
    """What a piece compiler provides; see the module docstring for handles and shapes."""

    #: Name stored in cache keys: ``(runtime_shape, graph_index, name)``.
    name: str = ""

    def initialize_cache(self, cache_dir: str, disable_cache: bool = False, prefix: str = "") -> None:
        """Use ``cache_dir`` (already per rank and prefix) for this compiler's own files."""
        self.cache_dir = cache_dir
        self.disable_cache = disable_cache
        self.prefix = prefix

    def compute_hash(self, config: Any) -> str:
        """A digest of this compiler's own state (versions, settings) for the cache directory."""
        return ""

    def compile(
        self,
        graph: fx.GraphModule,
        example_inputs: list,
        compiler_config: dict[str, Any],
        runtime_shape: Optional[int] = None,
        key: Optional[str] = None,
    ) -> tuple[Callable, Any]:
        """Compile ``graph``; returns ``(callable, handle)`` (handle ``None``: not cacheable)."""
        raise NotImplementedError

    def load(
        self, handle: Any, graph: fx.GraphModule, example_inputs: list, graph_index: int, runtime_shape: Optional[int] = None
    ) -> Callable:
        """The callable for ``handle``; raises :class:`CompileCacheLoadError` if it cannot."""
        raise NotImplementedError


def _digest(*factors: Any) -> str:
    return hashlib.sha256(repr(factors).encode()).hexdigest()[:10]


def _returns_tuple(graph: fx.GraphModule) -> bool:
    return inductor_module("compile_fx").graph_returns_tuple(graph)  # Inductor: heavy, imported on use


def _inductor_state_hash() -> str:
    codecache = inductor_module("codecache")  # Inductor: heavy, imported on use
    return _digest(codecache.CacheBase.get_system(), codecache.torch_key())


def _dynamo_convention(compiled: Callable, graph: fx.GraphModule, *, lists: bool) -> Callable:
    """A loaded Inductor graph returns a sequence (and, from the FX cache, takes a list); the
    stitching module calls pieces Dynamo's way: positional arguments, the graph's own return."""
    returns_tuple = _returns_tuple(graph)

    def run(*args):
        out = compiled(list(args)) if lists else compiled(*args)
        return out if returns_tuple else out[0]

    return run


class InductorStandaloneAdaptor(CompilerInterface):
    """``standalone_compile``; artifacts saved unpacked as ``<cache_dir>/<key>``."""

    name = "inductor_standalone"

    def compute_hash(self, config: Any) -> str:
        return _inductor_state_hash()

    def compile(self, graph, example_inputs, compiler_config, runtime_shape=None, key=None):
        standalone_compile = inductor_module("").standalone_compile  # Inductor: heavy, imported on use

        patches = dict(compiler_config or {})
        # A symbolic piece takes its dynamic sizes from Dynamo's tracing context; a concrete size
        # specialises on the example inputs (real tensors, at run time).
        dynamic = "from_example_inputs" if isinstance(runtime_shape, int) else "from_tracing_context"
        artifact = standalone_compile(graph, example_inputs, dynamic_shapes=dynamic, options={"config_patches": patches})
        if self.disable_cache or key is None:
            return artifact, None
        artifact.save(path=os.path.join(self.cache_dir, key), format="unpacked")
        # The path is stored relative to the cache directory, so the directory can be moved.
        return artifact, (key, key)

    def load(self, handle, graph, example_inputs, graph_index, runtime_shape=None):
        CompiledArtifact = inductor_module("").CompiledArtifact  # Inductor: heavy, imported on use

        key, relative = _check_pair(handle, self.name)
        path = os.path.join(self.cache_dir, relative)
        if os.path.isabs(relative) or ".." in relative.split(os.sep) or not os.path.isdir(path):
            raise CompileCacheLoadError(f"piece {graph_index} ({key}): artifact directory {path} is missing")
        try:
            artifact = CompiledArtifact.load(path=path, format="unpacked")
        except Exception as exc:  # any failure to read a cached artifact means: compile again
            raise CompileCacheLoadError(f"piece {graph_index} ({key}): {path} does not load: {exc}") from exc
        return _dynamo_convention(artifact, graph, lists=False)


def _check_pair(handle: Any, name: str) -> tuple[str, str]:
    if not (isinstance(handle, tuple) and len(handle) == 2 and all(isinstance(h, str) for h in handle)):
        raise CompileCacheLoadError(f"{name}: handle {handle!r} is not a (key, path) pair")
    return handle


class AlwaysHitShapeEnv:
    """A stand-in shape environment for Inductor's FX graph cache outside Dynamo's tracing
    context: a piece is compiled again per concrete size long after tracing ended, and a cached
    graph's guards were already settled when it was first compiled."""

    def __init__(self) -> None:
        self.guards: list = []
        self.var_to_val: dict = {}
        self.backed_var_to_val: dict = {}
        self.var_to_hint_override: dict = {}

    def evaluate_guards_expression(self, *args, **kwargs) -> bool:
        return True

    def get_pruned_guards(self, *args, **kwargs) -> list:
        return []

    def produce_guards_expression(self, *args, **kwargs) -> str:
        return ""


class InductorAdaptor(CompilerInterface):
    """``compile_fx`` with Inductor's FX graph cache in ``<cache_dir>/inductor_cache``."""

    name = "inductor"

    def compute_hash(self, config: Any) -> str:
        return _inductor_state_hash()

    def _cache_scope(self) -> contextlib.AbstractContextManager:
        """Inductor's cache directory is read from the environment on use: point it at ours for
        the duration of one compile or load only."""
        if self.disable_cache:
            return contextlib.nullcontext()
        inductor_dir = os.path.join(self.cache_dir, "inductor_cache")
        os.makedirs(inductor_dir, exist_ok=True)
        return env.foreign_override("TORCHINDUCTOR_CACHE_DIR", inductor_dir)

    def compile(self, graph, example_inputs, compiler_config, runtime_shape=None, key=None):
        codecache = inductor_module("codecache")  # Inductor: heavy, imported on use
        compile_fx_mod = inductor_module("compile_fx")

        patches = inductor_patches(compiler_config, runtime_shape)
        patches["fx_graph_cache"] = not self.disable_cache
        patches["fx_graph_remote_cache"] = False
        graph = copy.deepcopy(graph)  # Inductor may rewrite the graph it is given
        found: dict[str, str] = {}
        original_hash = codecache.compiled_fx_graph_hash
        original_inner = compile_fx_mod.compile_fx_inner

        def reading_hash(gm, example_inputs, fx_kwargs, *args, **kwargs):
            out = original_hash(gm, example_inputs, fx_kwargs, *args, **kwargs)
            if not fx_kwargs.get("is_backward", False):
                found["hash"] = out[0]
            return out

        def reading_inner(*args, **kwargs):
            compiled = original_inner(*args, **kwargs)
            cache_key = getattr(compiled, "_fx_graph_cache_key", None)
            if cache_key and not kwargs.get("is_backward", False):  # set on a cache hit too
                found["hash"] = cache_key
            return compiled

        with contextlib.ExitStack() as stack:
            stack.enter_context(self._cache_scope())
            stack.enter_context(mock.patch.object(codecache, "compiled_fx_graph_hash", reading_hash))
            stack.enter_context(_shape_env_patch(codecache))
            stack.enter_context(mock.patch.object(codecache.FxGraphCache, "_check_can_cache", _always_cacheable))
            # A hit in AOT Autograd's own cache would skip the inner compile and hide the key.
            stack.enter_context(functorch_config().patch(enable_autograd_cache=False, enable_remote_autograd_cache=False))
            compiled = compile_fx_mod.compile_fx(graph, example_inputs, inner_compile=reading_inner, config_patches=patches)
        if self.disable_cache or _needs_autograd(example_inputs):
            # The cached graph is AOT Autograd's inference graph; a piece traced for training is
            # a forward/backward pair that a plain cache entry cannot stand for.
            return compiled, None
        if "hash" not in found:
            raise NeuronBackendError(f"inductor: the FX graph cache key of piece {key} was not produced; caching is off for it")
        return compiled, (found["hash"], key or "")

    def load(self, handle, graph, example_inputs, graph_index, runtime_shape=None):
        codecache = inductor_module("codecache")  # Inductor: heavy, imported on use
        CompiledFxGraphConstantsWithGm = inductor_module("output_code").CompiledFxGraphConstantsWithGm

        hash_str, _ = _check_pair(handle, self.name)
        with contextlib.ExitStack() as stack:
            stack.enter_context(self._cache_scope())
            stack.enter_context(_shape_env_patch(codecache))
            try:
                compiled, _ = codecache.FxGraphCache._lookup_graph(
                    hash_str, example_inputs, True, None, CompiledFxGraphConstantsWithGm(graph)
                )
            except Exception as exc:  # an unreadable cache entry means: compile again
                raise CompileCacheLoadError(f"piece {graph_index}: Inductor cache entry {hash_str} does not load: {exc}") from exc
        if compiled is None:
            raise CompileCacheLoadError(f"piece {graph_index}: Inductor cache entry {hash_str} is missing")
        return _dynamo_convention(compiled, graph, lists=True)


def inductor_patches(compiler_config: Optional[dict[str, Any]], runtime_shape: Optional[int]) -> dict[str, Any]:
    """The Inductor config patches of one compile: ``compiler_config`` and, for a piece compiled
    for one concrete size, ``max_autotune`` and ``coordinate_descent_tuning`` (a specialised size
    is compiled once, lazily, and then runs every step of that size: worth tuning). An explicit
    value in ``compiler_config`` (``inductor_compile_config``) wins."""
    patches = dict(compiler_config or {})
    if isinstance(runtime_shape, int) and not isinstance(runtime_shape, bool):
        patches.setdefault("max_autotune", True)
        patches.setdefault("coordinate_descent_tuning", True)
    return patches


def _needs_autograd(example_inputs: list) -> bool:
    return torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs)


def _shape_env_patch(codecache) -> contextlib.AbstractContextManager:
    """Inside Dynamo's tracing context the real shape environment stays; outside it (a concrete
    size compiled at run time, a load in a fresh process) the always-hit one stands in."""
    original = codecache.FxGraphCache._get_shape_env

    def shape_env(*args, **kwargs):
        real = original()
        return real if real is not None else AlwaysHitShapeEnv()

    return mock.patch.object(codecache.FxGraphCache, "_get_shape_env", shape_env)


def _always_cacheable(*args, **kwargs) -> None:
    return None


class ReferenceAdaptor(CompilerInterface):
    """Pieces compiled by the reference backend's entry point (StableHLO -> IREE, NEFF cache).

    The compiler-args scope active when a piece is compiled is the one it keeps: the argument list
    is captured at :meth:`compile` and travels in the handle, so a piece compiled lazily per shape
    later (the backend compiles static shapes only) uses the same arguments.
    """

    name = "reference"

    def compute_hash(self, config: Any) -> str:
        return _digest(sorted(tool_versions().items()))

    def _compile(self, graph, example_inputs, compiler_args: Optional[list[str]], runtime_shape: Optional[int]) -> Callable:
        # on the same floor, but it imports the seam's floors on use; imported here likewise
        from reference.atom.reference_piece import ReferencePiece

        piece = ReferencePiece(graph, compiler_args, list(example_inputs))
        if runtime_shape is not None:
            # At run time, with real inputs whose size argument is a plain int: the artifact of
            # this size is built (or fetched) now, not on first use. Under Dynamo's tracing context
            # (the general shape, symbolic sizes) nothing is built: each size builds on first use.
            piece.build(list(example_inputs))
        return piece

    def compile(self, graph, example_inputs, compiler_config, runtime_shape=None, key=None):
        args = current_scoped_compiler_args()
        compiled = self._compile(graph, example_inputs, args, runtime_shape)
        return compiled, {"compiler_args": args}

    def load(self, handle, graph, example_inputs, graph_index, runtime_shape=None):
        if not (isinstance(handle, dict) and set(handle) == {"compiler_args"}):
            raise CompileCacheLoadError(f"reference: handle {handle!r} of piece {graph_index} is not {{'compiler_args': ...}}")
        args = handle["compiler_args"]
        if args is not None and not (isinstance(args, list) and all(isinstance(a, str) for a in args)):
            raise CompileCacheLoadError(f"reference: compiler_args {args!r} of piece {graph_index} is not a list of strings")
        return self._compile(graph, example_inputs, args, runtime_shape)


def make_compiler(compilation_config: Any) -> CompilerInterface:
    """The piece compiler a configuration asks for.

    ``piece_compiler`` names one explicitly; otherwise ``use_inductor=False`` is the reference
    compiler, and Inductor is the standalone adaptor on torch 2.8 and later, ``compile_fx`` before.
    """
    choice = getattr(compilation_config, "piece_compiler", "") or ""
    if choice == "reference" or (not choice and not compilation_config.use_inductor):
        return ReferenceAdaptor()
    if choice == "inductor":
        return InductorAdaptor()
    if choice == "inductor_standalone" or _torch_at_least(2, 8):
        return InductorStandaloneAdaptor()
    return InductorAdaptor()


def _torch_at_least(major: int, minor: int) -> bool:
    parts = torch.__version__.split("+")[0].split(".")
    return (int(parts[0]), int(parts[1])) >= (major, minor)
