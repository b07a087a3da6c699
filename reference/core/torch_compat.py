"""The one boundary between the reference and torch's private internals.

**What counts as private.** Any name of torch that starts with ``torch._`` and is not a dunder
(``torch._dynamo``, ``torch._ops.OpOverload``, ``torch._C._dispatch_has_kernel``, ``from torch
import _dynamo``): torch documents none of them, and any release may change them. Dunders
(``torch.__version__``, ``torch.__file__``) are public. Where torch has a public spelling of the
same thing, the reference uses it instead and this module does not list it (``torch.compiler.disable``
and ``torch.compiler.reset`` rather than ``torch._dynamo.disable`` / ``reset``).

**The rule.** This module is the only one in ``reference/`` whose code names a private torch
module or attribute; every other module imports what it needs from here (``tests/core/test_torch_compat.py``
walks the tree's syntax and names each file and line that breaks the rule; strings and comments
do not count). Each name below is grouped with what the reference relies on it for, and
``tests/core/test_torch_compat.py`` has a test per group showing that torch still behaves that way.

**The versions.** :data:`WRITTEN_FOR` lists the torch releases these names were written and tested
against. Plain names (types, functions) are bound at import on every release; if one is gone the
import fails with torch's own ``ImportError`` naming it. The behaviour-changing hooks (the Dynamo
trace hooks, the inference plans' reading of AOT Autograd's metadata) check
:func:`check_torch_version` first: on another release they stay off with a
:class:`TorchVersionWarning` that names the release and what is lost.

Importing this module patches nothing of torch and computes nothing (it only puts Dynamo's
``ShortenTraceback`` under the reference's own errors, :func:`reference.core.errors.derive_from_dynamo`,
which do not import Dynamo themselves): it binds names from torch modules that
``import torch._dynamo`` loads anyway (and Dynamo's precompile context, which the precompile seam
subclasses at import); Inductor, Dynamo's ``aot_autograd`` factory and AOT Autograd's entry point
are imported only by the functions that need them.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
import torch._C
import torch._dynamo.config
import torch._functorch.config
from torch._decomp import core_aten_decompositions, get_decompositions
from torch._dispatch.python import enable_python_dispatcher
from torch._dynamo.eval_frame import OptimizedModule
from torch._dynamo.aot_compile_types import SerializableCallable
from torch._dynamo.precompile_context import BackendCacheArtifact, PrecompileContext
from torch._dynamo.exc import ShortenTraceback, TensorifyScalarRestartAnalysis, Unsupported, unimplemented
from torch._dynamo.source import LocalSource
from torch._functorch._aot_autograd.schemas import OutputType, SubclassCreationMeta
from torch._functorch._aot_autograd.utils import make_boxed_func
from torch._guards import TracingContext, detect_fake_mode
from torch._library.custom_ops import OPDEFS
from torch._ops import OpOverload, OpOverloadPacket
from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily
from torch.utils import _pytree as pytree

from reference.core import errors as _errors
from reference.core.torch_runtime import tensor_from_dlpack_capsule

# The reference's errors pass through Dynamo unwrapped from now on (reference.core.errors).
_errors.derive_from_dynamo(ShortenTraceback)

__all__ = [
    "WRITTEN_FOR", "TorchVersionWarning", "torch_release", "torch_supported", "check_torch_version",
    # ops and the dispatcher
    "OpOverload", "OpOverloadPacket", "OPDEFS", "dispatch_has_kernel", "dispatch_has_kernel_for_key", "has_composite_implicit_kernel",
    "resolve_packet_overload", "core_aten_decompositions", "get_decompositions",
    # pytrees (flattening nested outputs)
    "pytree",
    # fake tensors and dispatch modes
    "FakeTensorMode", "unset_fake_temporarily", "detect_fake_mode", "enable_python_dispatcher",
    # Dynamo
    "ShortenTraceback", "Unsupported", "OptimizedModule", "LocalSource", "dynamo_config", "lookup_backend",
    "mark_dynamic", "register_bytecode_hook", "DynamoTraceHooks", "DYNAMO_HOOKS", "RetraceRequest",
    "traced_backends", "graph_break", "python_value", "trace_attempt",
    # AOT Autograd
    "functorch_config", "make_boxed_func", "aot_module_simplified", "aot_autograd_backend", "aot_graph_names",
    "aot_forward_metadata", "AOTInferenceFacts", "aot_inference_facts", "next_aot_id", "OutputType", "SubclassCreationMeta",
    "tracing_of_its_own",
    # DLPack
    "tensor_from_dlpack_capsule",
    # precompile and Inductor
    "BackendCacheArtifact", "PrecompileContext", "inductor_module",
    # AOT compile (torch.compile(...).aot_compile, torch.compiler.load_compiled_function)
    "SerializableCallable", "aot_compile_requested", "aot_compiled_function_type", "aot_guard_failure",
    "AOTRuntimeParts", "aot_runtime_parts",
]

#: The torch releases (major.minor) whose private names and behaviour this module was written and
#: tested against.
WRITTEN_FOR: tuple[str, ...] = ("2.13",)


class TorchVersionWarning(UserWarning):
    """A hook of the reference stays off because torch is not a release in :data:`WRITTEN_FOR`."""


def torch_release(version: str | None = None) -> str:
    """``major.minor`` of ``version`` (default: the running torch), ``"2.13"`` for ``"2.13.0+cpu"``."""
    parts = (version or torch.__version__).split("+")[0].split(".")
    return ".".join(parts[:2])


def torch_supported(version: str | None = None) -> bool:
    return torch_release(version) in WRITTEN_FOR


_warned: set[str] = set()
_warned_lock = threading.Lock()


def check_torch_version(feature: str, consequence: str, *, version: str | None = None) -> bool:
    """True on a release in :data:`WRITTEN_FOR`; otherwise warn once per ``feature`` with a
    :class:`TorchVersionWarning` naming the running release and ``consequence``, and return False."""
    if torch_supported(version):
        return True
    with _warned_lock:
        first = feature not in _warned
        _warned.add(feature)
    if first:
        warnings.warn(
            f"neuron reference: {feature} was written for torch {', '.join(WRITTEN_FOR)}; this process runs "
            f"torch {version or torch.__version__}, so {consequence}",
            TorchVersionWarning,
            stacklevel=3,
        )
    return False


# --- ops and the dispatcher -------------------------------------------------------------------------


def dispatch_has_kernel(qualified_name: str) -> bool:
    """Whether an op ``namespace::name[.overload]`` (no overload: the default one) has a kernel
    registered with the dispatcher in this process."""
    return bool(torch._C._dispatch_has_kernel(qualified_name))


def dispatch_has_kernel_for_key(qualified_name: str, dispatch_key: str) -> bool:
    """Whether op ``namespace::name`` has a kernel registered for ``dispatch_key`` (``"CUDA"``,
    ``"CPU"``, ...); answers on any build, a CPU-only one included."""
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(qualified_name, dispatch_key))


def has_composite_implicit_kernel(op: OpOverload) -> bool:
    """Whether ``op`` has a ``CompositeImplicitAutograd`` kernel (it decomposes itself)."""
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd"))


def resolve_packet_overload(packet: OpOverloadPacket, args: Any, kwargs: dict) -> str | None:
    """The overload name the dispatcher's schema matcher picks for a call of ``packet``, or
    ``None`` when it cannot match the values."""
    try:
        return torch._C._jit_resolve_packet(packet._qualified_op_name, *args, **kwargs)
    except Exception:  # values the schema matcher cannot take
        return None


# --- Dynamo ----------------------------------------------------------------------------------------


def dynamo_config():
    """``torch._dynamo.config`` (``automatic_dynamic_shapes``, ``assume_static_by_default``,
    ``caching_precompile``, its ``patch``)."""
    return torch._dynamo.config


def lookup_backend(name_or_fn: Any) -> Callable:
    """The compiler function registered under a backend name (a callable is returned as it is)."""
    from torch._dynamo.backends.registry import lookup_backend as lookup

    return lookup(name_or_fn)


def mark_dynamic(tensor: torch.Tensor, dims: Any) -> None:
    torch._dynamo.mark_dynamic(tensor, dims)


def register_bytecode_hook(hook: Callable) -> Any:
    """Dynamo calls ``hook(code, new_code)`` after it converts a frame; returns the handle."""
    return torch._dynamo.convert_frame.register_bytecode_hook(hook)


def graph_break(*, gb_type: str, context: str, explanation: str, hints: list[str]) -> None:
    """Raise Dynamo's graph-break exception from inside a trace: with ``fullgraph=False`` the call
    runs eagerly between two graphs, with ``fullgraph=True`` the user gets ``Unsupported`` with
    this ``gb_type``."""
    unimplemented(gb_type=gb_type, context=context, explanation=explanation, hints=hints)


def python_value(var: Any) -> Any:
    """A Python value for one of Dynamo's variable trackers: the fake tensor of a tensor (also
    inside a list or tuple), else the constant, else ``None``."""
    from torch._dynamo.variables.lists import BaseListVariable
    from torch._dynamo.variables.tensor import TensorVariable

    if isinstance(var, TensorVariable):
        return var.proxy.node.meta.get("example_value")
    if isinstance(var, BaseListVariable):
        items = [python_value(v) for v in var.items]
        return tuple(items) if var.python_type() is tuple else items
    try:
        return var.as_python_constant()
    except Exception:
        return None


def traced_backends(tx: Any) -> Iterator[Any]:
    """The compiler functions Dynamo traces the current frame for, outermost wrapper first:
    ``tx.output.compiler_fn`` and what it wraps (Dynamo's debug wrapper, ``torch.compile``'s
    options wrapper, ``functools.wraps`` chains). Known while the frame is traced, before any
    backend is called."""
    fn = getattr(getattr(tx, "output", None), "compiler_fn", None)
    for _ in range(8):
        if fn is None:
            return
        yield fn
        fn = (
            getattr(fn, "_torchdynamo_orig_backend", None)
            or getattr(fn, "compiler_fn", None)
            or getattr(fn, "__wrapped__", None)
            or getattr(fn, "func", None)  # functools.partial
        )


class RetraceRequest(TensorifyScalarRestartAnalysis):
    """Raised by a backend to have Dynamo trace the current frame again from its start.

    Dynamo lets exactly this family of restarts through a backend call (the others become
    ``BackendCompilerFailed``); its restart loop then traces the frame again and calls the
    backend with the new graph."""

    def __init__(self, reason: str) -> None:
        super().__init__()
        self.restart_reason = reason


class DynamoTraceHooks:
    """Dynamo's handlers of calls, wrapped so that a callback sees each call while a frame is traced.

    - ``TorchInGraphFunctionVariable.call_function``: a call of a torch function or an op
      (``torch.sort(x)``, ``torch.ops.aten.histc.default(x)``): ``on_function(tx, fn, args, kwargs)``;
    - ``TensorVariable.call_method``: a tensor method (``x.sort()``): ``on_method(tx, name, args, kwargs)``;
    - ``BuiltinVariable.call_function``, when ``on_builtin`` is given: an operator or builtin
      (``1 / x``, ``operator.truediv``): ``on_builtin(tx, fn, args, kwargs)``;
    - ``variables.builder._automatic_dynamic`` and ``VariableBuilder.wrap_symint``: where Dynamo
      decides whether a size becomes symbolic: when ``keep_static(tx)`` is true, automatic dynamic
      shapes are off for that decision.

    The callbacks decide for themselves whether the frame is theirs (:func:`traced_backends`);
    for every other frame they return at once and the original handler runs as it would. They
    may raise through :func:`graph_break`. :meth:`install` is explicit and idempotent;
    :meth:`uninstall` restores Dynamo's handlers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._originals: dict[tuple[Any, str], Any] = {}

    def installed(self) -> bool:
        return bool(self._originals)

    def install(
        self,
        on_function: Callable[[Any, Any, list, dict], None],
        on_method: Callable[[Any, str, list, dict], None],
        keep_static: Callable[[Any], bool],
        on_builtin: Callable[[Any, Any, list, dict], None] | None = None,
    ) -> bool:
        """Wrap the handlers (once); False, with a :class:`TorchVersionWarning`, on a torch release
        outside :data:`WRITTEN_FOR`."""
        with self._lock:
            if self._originals:
                return True
            if not check_torch_version(
                "the Dynamo trace hooks (forced graph breaks, static shapes)",
                "they are not installed: an op with no lowering fails its compile with a LoweringError "
                "instead of breaking the graph",
            ):
                return False
            from torch._dynamo.variables import builder
            from torch._dynamo.variables.builtin import BuiltinVariable
            from torch._dynamo.variables.tensor import TensorVariable
            from torch._dynamo.variables.torch import TorchInGraphFunctionVariable

            orig_fn = TorchInGraphFunctionVariable.call_function
            orig_method = TensorVariable.call_method
            orig_auto = builder._automatic_dynamic
            orig_symint = builder.VariableBuilder.wrap_symint
            orig_builtin = BuiltinVariable.call_function

            @functools.wraps(orig_fn)
            def call_function(self, tx, args, kwargs):
                on_function(tx, self.value, list(args), dict(kwargs))
                return orig_fn(self, tx, args, kwargs)

            @functools.wraps(orig_method)
            def call_method(self, tx, name, args, kwargs):
                if isinstance(name, str) and not name.startswith("__"):
                    on_method(tx, name, [self, *args], dict(kwargs))
                return orig_method(self, tx, name, args, kwargs)

            @functools.wraps(orig_builtin)
            def builtin_call(self, tx, args, kwargs):
                if on_builtin is not None:
                    on_builtin(tx, self.fn, list(args), dict(kwargs))
                return orig_builtin(self, tx, args, kwargs)

            @functools.wraps(orig_auto)
            def _automatic_dynamic(e, tx, *args, **kwargs):
                with _static_shapes(keep_static(tx)):
                    return orig_auto(e, tx, *args, **kwargs)

            @functools.wraps(orig_symint)
            def wrap_symint(self, *args, **kwargs):
                with _static_shapes(keep_static(self.tx)):
                    return orig_symint(self, *args, **kwargs)

            for owner, attr, wrapper in (
                (TorchInGraphFunctionVariable, "call_function", call_function),
                (TensorVariable, "call_method", call_method),
                (builder, "_automatic_dynamic", _automatic_dynamic),
                (builder.VariableBuilder, "wrap_symint", wrap_symint),
                *(((BuiltinVariable, "call_function", builtin_call),) if on_builtin is not None else ()),
            ):
                self._originals[(owner, attr)] = getattr(owner, attr)
                setattr(owner, attr, wrapper)
            return True

    def uninstall(self) -> None:
        with self._lock:
            for (owner, attr), original in self._originals.items():
                setattr(owner, attr, original)
            self._originals.clear()


def _static_shapes(keep: bool):
    cfg = torch._dynamo.config
    if keep and cfg.automatic_dynamic_shapes and cfg.assume_static_by_default:
        return cfg.patch(automatic_dynamic_shapes=False)
    return contextlib.nullcontext()


#: The process's one set of Dynamo trace hooks.
DYNAMO_HOOKS = DynamoTraceHooks()


# --- AOT Autograd ----------------------------------------------------------------------------------


def functorch_config():
    """``torch._functorch.config``: AOT Autograd's configuration (``patch``,
    ``save_config_portable``, ``bundled_autograd_cache``, ``force_non_lazy_backward_lowering``)."""
    return torch._functorch.config


def aot_module_simplified(*args: Any, **kwargs: Any) -> Callable:
    from torch._functorch.aot_autograd import aot_module_simplified as aot

    return aot(*args, **kwargs)


def aot_autograd_backend(**kwargs: Any) -> Callable:
    """Dynamo's ``aot_autograd(...)`` backend factory (it flattens nested inputs)."""
    from torch._dynamo.backends.common import aot_autograd

    return aot_autograd(**kwargs)


def current_tracing_context() -> Any:
    return TracingContext.try_get()


def trace_attempt() -> int | None:
    """Which trace of the frame compile in progress this is: 0 for the first, one more for each
    restart of its analysis; ``None`` outside a Dynamo compile."""
    from torch._guards import CompileContext

    trace_id = CompileContext.current_trace_id()
    return None if trace_id is None else trace_id.attempt


def aot_graph_names() -> list[str] | None:
    """AOT Autograd's names of the graph being compiled (``["3_inference"]``), or ``None``."""
    tc = TracingContext.try_get()
    return getattr(tc, "aot_graph_name", None) if tc is not None else None


def aot_forward_metadata() -> Any:
    """AOT Autograd's ``ViewAndMutationMeta`` of the graph its forward compiler is compiling, or
    ``None`` outside one."""
    tc = TracingContext.try_get()
    return getattr(tc, "fw_metadata", None) if tc is not None else None


@dataclass(frozen=True)
class AOTInferenceFacts:
    """What the inference plans need from AOT Autograd's metadata of one graph.

    ``why_not`` is ``None`` when AOT Autograd's runtime wrapper of the graph would do nothing but
    copy the new values of ``mutated_inputs`` back into the caller's tensors; otherwise it says
    what else the wrapper does."""

    n_inputs: int
    mutated_inputs: tuple[int, ...]
    n_outputs: int
    why_not: str | None


def aot_inference_facts() -> AOTInferenceFacts | None:
    """The facts of the graph AOT Autograd's forward compiler is compiling, read from its
    ``ViewAndMutationMeta``; ``None`` outside a forward compiler, or (with a
    :class:`TorchVersionWarning`) on a torch release outside :data:`WRITTEN_FOR`, whose metadata
    these fields were not checked against."""
    if not check_torch_version(
        "the inference plans (AOT Autograd's graph metadata)",
        "no graph gets an inference plan: every start traces each graph through AOT Autograd",
    ):
        return None
    meta = aot_forward_metadata()
    if meta is None:
        return None
    mutated = tuple(meta.mutated_inp_runtime_indices)
    facts = functools.partial(AOTInferenceFacts, len(meta.input_info), mutated, len(meta.output_info))
    if meta.tokens or meta.num_intermediate_bases or getattr(meta, "num_graphsafe_rng_states", 0):
        return facts("effect tokens, intermediate bases or RNG state")
    if meta.grad_enabled_mutation is not None or getattr(meta, "num_mutated_graph_handled_indices", 0):
        return facts("the graph changes grad mode or keeps a mutation in the graph")
    if any(isinstance(m, SubclassCreationMeta) for m in list(meta.subclass_inp_meta) + list(meta.subclass_fw_graph_out_meta)):
        return facts("a tensor subclass")
    if any(o.output_type is not OutputType.non_alias for o in meta.output_info):
        return facts("an output that aliases an input or an intermediate")
    for i in mutated:
        info = meta.input_info[i]
        if not info.mutates_data or info.mutates_metadata or info.mutates_storage_metadata or info.mutation_inductor_storage_resize:
            return facts(f"input {i} has its metadata or storage changed")
    streams = getattr(meta, "mutated_inp_stream_indices", None)
    if streams and any(s is not None for s in streams):
        return facts("an input mutated on a user stream")
    return facts(None)


def tracing_of_its_own() -> contextlib.AbstractContextManager:
    """A tracing context of its own, with a fresh fake mode (static shapes), for AOT Autograd run
    outside Dynamo: AOT Autograd records a graph's names and metadata in the active context only
    (:func:`aot_graph_names`, :func:`aot_forward_metadata`), and fakes real inputs in its mode."""
    from torch._guards import tracing

    return tracing(TracingContext(FakeTensorMode()))


def next_aot_id() -> int:
    """Take the next number AOT Autograd gives a graph (its ``AOT_COUNTER``)."""
    from torch._functorch.aot_autograd import AOT_COUNTER

    return next(AOT_COUNTER)


# --- DLPack ----------------------------------------------------------------------------------------

# tensor_from_dlpack_capsule: reference.core.torch_runtime's (a serving process imports it without Dynamo)


# --- precompile and Inductor ----------------------------------------------------------------------


def inductor_module(name: str):
    """An Inductor module by its name under ``torch._inductor`` (``""`` for the package,
    ``"codecache"``, ``"compile_fx"``, ``"output_code"``); imported on use (Inductor is heavy)."""
    import importlib

    return importlib.import_module("torch._inductor" + (f".{name}" if name else ""))


# --- AOT compile ------------------------------------------------------------------------------------
# ``torch.compile(fn, fullgraph=True).aot_compile(...)`` asks the backend for a
# ``SerializableCallable`` (``torch._dynamo.aot_compile_types``): a callable with a classmethod
# pair that turns it into bytes and back. ``save_compiled_function`` stores those bytes inside
# Dynamo's own pickle (bytecode, guards, signature); ``torch.compiler.load_compiled_function``
# unpickles it and calls the backend class's deserializer.


def aot_compile_requested() -> bool:
    """Whether the graph now handed to a backend must come back serializable: torch's AOT compile
    (and its standalone compile) turn on AOT Autograd's bundled cache for the backend call, and
    nothing else does."""
    return bool(torch._functorch.config.bundled_autograd_cache)


def aot_compiled_function_type() -> type:
    """``torch._dynamo.aot_compile.AOTCompiledFunction``: what ``aot_compile`` returns and
    ``load_compiled_function`` makes (``serialize``/``deserialize``, ``guard_check``)."""
    from torch._dynamo.aot_compile import AOTCompiledFunction

    return AOTCompiledFunction


def aot_guard_failure(compiled: Any, args: tuple, kwargs: dict) -> str | None:
    """``None`` when an AOT-compiled function's guards accept ``args``/``kwargs``; otherwise
    Dynamo's account of the first guard that failed."""
    if compiled.guard_check(*args, **kwargs):
        return None
    f_locals = compiled.prepare_f_locals(*args, **kwargs)
    info = compiled._artifacts.guard_manager.check_verbose(f_locals)
    return "; ".join(str(p) for p in info.verbose_code_parts) or "a guard failed"


@dataclass(frozen=True)
class AOTRuntimeParts:
    """What an AOT-compiled function runs once its guards passed, read off torch's object: Dynamo's
    generated bytecode (the traced function's code, calling the backend's graph), what its globals
    are (module aliases, captured values, the graph under ``backend_id``), its closure and
    defaults, the names it needs from the traced function's module, and the signature."""

    bytecode: Any
    import_sources: dict
    used_globals: dict
    closure: Any
    argdefs: Any
    kwdefaults: Any
    external_refs: frozenset
    backend_id: str
    compiled_fn: Any
    signature: Any


def aot_runtime_parts(compiled: Any) -> AOTRuntimeParts:
    """The :class:`AOTRuntimeParts` of ``compiled`` (what ``aot_compile`` returned), from
    ``AOTCompiledFunction._artifacts`` and its ``GraphRuntimeEnv``."""
    artifacts = compiled._artifacts
    env = artifacts.runtime_env
    return AOTRuntimeParts(
        bytecode=env.bytecode, import_sources=dict(env.import_sources), used_globals=dict(env.used_globals),
        closure=env.closure, argdefs=env.argdefs, kwdefaults=dict(env.kwdefaults) if env.kwdefaults else None,
        external_refs=frozenset(getattr(env, "external_refs", ()) or ()), backend_id=str(artifacts.backend_id),
        compiled_fn=artifacts.compiled_fn, signature=artifacts.signature,
    )
