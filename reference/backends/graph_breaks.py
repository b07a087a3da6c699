"""Graph breaks the backend forces while Dynamo traces.

Some calls cannot be compiled by the backend, so Dynamo must leave them out of the graph: they run
eagerly between two compiled graphs (``fullgraph=False``), or the compile fails with
``torch._dynamo.exc.Unsupported`` whose ``gb_type`` is :data:`GB_TYPE` (``fullgraph=True``). The
rules, for the function form (``torch.sort(x)``) and the method form (``x.sort()``) alike:

- ``sort`` / ``argsort``: when the sorted dimension has more than ``sort`` (16,384) elements;
- ``topk``: when ``k`` is ``topk`` (16,384) or larger;
- ``grouped_mm`` (``torch.nn.functional.grouped_mm``, ``torch._grouped_mm``): always;
- every op in the checked-in op table: always. Those are the ops that, called alone on a small
  input, do not lower, compile, run and match eager with the installed tools
  (:mod:`reference.lowering.optable` generates the table; this module only reads it);
- every op of another namespace (``torch.ops.<namespace>.<op>``: custom ops registered with
  ``torch.library`` by a library or the user) that does not lower: no lowering of the backend's
  own and no decomposition to ops that lower (:mod:`reference.lowering.op_decisions` decides, once
  per op and tool versions). The diagnostic names the op by its qualified name
  (``op=transformers::grouped_mm_fallback``).

Below their thresholds ``sort``, ``argsort`` and ``topk`` compile (the backend's decompositions in
:mod:`reference.lowering.sorting`), with ties ordered by index like ``torch.sort(stable=True)``.

Shapes are static for these backends: while Dynamo traces for them, automatic dynamic shapes are
off (unless the caller asked for ``dynamic=True``, which the backend then rejects), so a new input
shape recompiles with static sizes and the size-dependent rules above can decide.

The rules apply only to compiles whose backend opted in with :func:`forces_graph_breaks` (the
reference's seams); other backends in the same process trace as usual.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import torch

from reference.core.errors import BackendOptionError
from reference.fx_passes.backend_config_pass import inlined_implementation
from reference.lowering.op_decisions import CORE_NAMESPACES, DECISIONS, namespace_of
from reference.lowering.optable import break_ops

#: The diagnostic type of the ``Unsupported`` raised under ``fullgraph=True``.
GB_TYPE = "Op not supported by the Neuron backend"

DEFAULT_THRESHOLDS = {"sort": 16384, "topk": 16384}
ALWAYS_BREAK = ("grouped_mm", "_grouped_mm")


class _Thresholds:
    """The sort/topk thresholds, process-wide; one small object with set/get/reset."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = dict(DEFAULT_THRESHOLDS)

    def set(self, **values: int) -> None:
        unknown = sorted(set(values) - set(DEFAULT_THRESHOLDS))
        if unknown:
            raise BackendOptionError(
                f"unknown graph-break threshold(s) {unknown}; known thresholds: {sorted(DEFAULT_THRESHOLDS)}"
            )
        for name, v in values.items():
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise BackendOptionError(f"graph-break threshold {name!r} must be a positive int, got {v!r}")
        with self._lock:
            self._values.update(values)

    def get(self, name: str) -> int:
        with self._lock:
            return self._values[name]

    def reset(self) -> None:
        with self._lock:
            self._values = dict(DEFAULT_THRESHOLDS)


THRESHOLDS = _Thresholds()


def set_graph_break_thresholds(**values: int) -> None:
    """Change ``sort`` and/or ``topk`` (elements); an unknown name raises :class:`BackendOptionError`."""
    THRESHOLDS.set(**values)


def reset_graph_break_thresholds() -> None:
    THRESHOLDS.reset()


# --- the rule -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BreakDecision:
    op: str
    reason: str


def _shape(value: Any) -> tuple[int, ...] | None:
    shape = getattr(value, "shape", None)
    if shape is None:
        return None
    try:
        return tuple(int(s) for s in shape)
    except Exception:  # symbolic sizes: cannot decide statically
        return None


def decide(name: str, args: list, kwargs: dict) -> BreakDecision | None:
    """Whether a call of op ``name`` with (fake/real) ``args`` must break the graph, and why.

    ``args[0]`` is the tensor the op applies to; other arguments are Python values.
    """
    if name in ("sort", "argsort"):
        shape = _shape(args[0]) if args else None
        dim = kwargs.get("dim", args[1] if len(args) > 1 and isinstance(args[1], int) and not isinstance(args[1], bool) else -1)
        if shape is None or not isinstance(dim, int):
            return None
        if not shape:
            return None
        n = shape[dim]
        limit = THRESHOLDS.get("sort")
        if n > limit:
            return BreakDecision(name, f"the sorted dimension has {n} elements, more than {limit}")
        return None
    if name == "topk":
        k = kwargs.get("k", args[1] if len(args) > 1 else None)
        limit = THRESHOLDS.get("topk")
        if isinstance(k, int) and k >= limit:
            return BreakDecision(name, f"k={k} is {limit} or larger")
        return None
    if name in ALWAYS_BREAK:
        return BreakDecision(name, "grouped_mm has no lowering on this backend")
    reason = break_ops().get(name)
    if reason is not None:
        return BreakDecision(name, reason)
    return None


# --- the Dynamo hook ----------------------------------------------------------------------------

_OPT_IN = "_neuron_forces_graph_breaks"


def forces_graph_breaks(backend: Callable) -> Callable:
    """Mark a backend function so that compiles using it get the backend's graph breaks (once the
    hooks are installed: :func:`install`)."""
    setattr(backend, _OPT_IN, True)
    return backend


def _backend_opted_in(tx) -> bool:
    fn = getattr(getattr(tx, "output", None), "compiler_fn", None)
    for _ in range(8):
        if fn is None:
            return False
        if getattr(fn, _OPT_IN, False):
            return True
        fn = getattr(fn, "compiler_fn", None) or getattr(fn, "__wrapped__", None) or getattr(fn, "_torchdynamo_orig_backend", None)
    return False


def _python_value(var) -> Any:
    """A Python value for a VariableTracker: the fake tensor of a tensor (also inside a list or
    tuple), else the constant."""
    from torch._dynamo.variables.lists import BaseListVariable
    from torch._dynamo.variables.tensor import TensorVariable

    if isinstance(var, TensorVariable):
        return var.proxy.node.meta.get("example_value")
    if isinstance(var, BaseListVariable):
        items = [_python_value(v) for v in var.items]
        return tuple(items) if var.python_type() is tuple else items
    try:
        return var.as_python_constant()
    except Exception:
        return None


def _raise(decision: BreakDecision, form: str) -> None:
    from torch._dynamo.exc import unimplemented

    unimplemented(
        gb_type=GB_TYPE,
        context=f"op={decision.op} ({form}): {decision.reason}",
        explanation=f"The Neuron backend cannot compile {form}: {decision.reason}. "
        "With fullgraph=False the call runs eagerly between compiled graphs.",
        hints=[
            "Use fullgraph=False to let this op run eagerly, or move it outside the compiled region.",
        ],
    )


_SIZE_RULES = ("sort", "argsort", "topk")


def _check(tx, name: str, args: list, kwargs: dict, form: str) -> None:
    if name not in _SIZE_RULES and name not in ALWAYS_BREAK and name not in break_ops():
        return  # the common case: nothing to decide, no values to read
    if not _backend_opted_in(tx):
        return
    values = [_python_value(a) for a in args]
    kw = {k: _python_value(v) for k, v in kwargs.items()}
    decision = decide(name, values, kw)
    if decision is not None:
        _raise(decision, form)


def _overload(op, args: list, kwargs: dict) -> torch._ops.OpOverload | None:
    """The overload a call of ``op`` (an overload, or a packet resolved from the call's values)
    runs."""
    if isinstance(op, torch._ops.OpOverload):
        return op
    try:
        name = torch._C._jit_resolve_packet(op._qualified_op_name, *args, **kwargs)
    except Exception:  # values the schema matcher cannot take: the packet's usual overload
        names = op.overloads()
        name = "default" if "default" in names else (names[0] if names else None)
    return getattr(op, name or "default", None)


def _check_op(tx, op, args: list, kwargs: dict) -> None:
    """A call of ``torch.ops.<namespace>.<name>[.<overload>]``: ATen by the op table's rules,
    another namespace by whether the op lowers."""
    namespace = namespace_of(op)
    packet = op.overloadpacket if isinstance(op, torch._ops.OpOverload) else op
    if namespace == "aten":
        _check(tx, packet.__name__, args, kwargs, f"torch.ops.aten.{packet.__name__}()")
        return
    if namespace in CORE_NAMESPACES or not _backend_opted_in(tx):
        return
    values = [_python_value(a) for a in args]
    kw = {k: _python_value(v) for k, v in kwargs.items()}
    overload = _overload(op, values, kw)
    if overload is None:
        return
    decision = DECISIONS.decide(overload, values, kw, inline_impl=inlined_implementation(overload))
    if not decision.lowers:
        _raise(BreakDecision(decision.op, decision.reason), f"torch.ops.{namespace}.{packet.__name__}()")


def _static_for_opted_in(tx):
    cfg = torch._dynamo.config
    if cfg.automatic_dynamic_shapes and cfg.assume_static_by_default and _backend_opted_in(tx):
        return cfg.patch(automatic_dynamic_shapes=False)
    return contextlib.nullcontext()


#: The torch releases whose Dynamo internals the hooks below were written against.
WRITTEN_FOR = ("2.13",)

_installed: dict[tuple[Any, str], Any] = {}  # (owner, attribute) -> the original, while installed
_install_lock = threading.Lock()


def _torch_supported() -> bool:
    return any(torch.__version__.startswith(v + ".") or torch.__version__ == v for v in WRITTEN_FOR)


def installed() -> bool:
    return bool(_installed)


def install() -> None:
    """Wrap Dynamo's handlers of torch function calls and tensor method calls (idempotent).

    Only on the torch releases in :data:`WRITTEN_FOR`: on another one the hooks are left out with a
    warning (an op with no lowering then fails the compile with a ``LoweringError`` instead of
    breaking the graph). Installing patches four handlers and computes nothing: the list of ops
    with no lowering is read on the first trace that needs it. :func:`uninstall` restores
    Dynamo's handlers until the next :func:`install`."""
    with _install_lock:
        if _installed:
            return
        if not _torch_supported():
            warnings.warn(
                f"neuron backend: the graph-break hooks were written for torch {', '.join(WRITTEN_FOR)}, "
                f"not {torch.__version__}; they are not installed",
                stacklevel=3,
            )
            return
        from torch._dynamo.variables import builder
        from torch._dynamo.variables.tensor import TensorVariable
        from torch._dynamo.variables.torch import TorchInGraphFunctionVariable

        orig_fn = TorchInGraphFunctionVariable.call_function
        orig_method = TensorVariable.call_method

        op_types = (torch._ops.OpOverload, torch._ops.OpOverloadPacket)

        @functools.wraps(orig_fn)
        def call_function(self, tx, args, kwargs):
            if isinstance(self.value, op_types):
                _check_op(tx, self.value, list(args), dict(kwargs))
                return orig_fn(self, tx, args, kwargs)
            name = getattr(self.value, "__name__", None)
            if isinstance(name, str):
                _check(tx, name, list(args), dict(kwargs), f"torch.{name}()")
            return orig_fn(self, tx, args, kwargs)

        @functools.wraps(orig_method)
        def call_method(self, tx, name, args, kwargs):
            if isinstance(name, str) and not name.startswith("__"):
                _check(tx, name, [self, *args], dict(kwargs), f"Tensor.{name}()")
            return orig_method(self, tx, name, args, kwargs)

        orig_auto = builder._automatic_dynamic
        orig_symint = builder.VariableBuilder.wrap_symint

        @functools.wraps(orig_auto)
        def _automatic_dynamic(e, tx, *args, **kwargs):
            with _static_for_opted_in(tx):
                return orig_auto(e, tx, *args, **kwargs)

        @functools.wraps(orig_symint)
        def wrap_symint(self, *args, **kwargs):
            with _static_for_opted_in(self.tx):
                return orig_symint(self, *args, **kwargs)

        for owner, attr, wrapper in (
            (TorchInGraphFunctionVariable, "call_function", call_function),
            (TensorVariable, "call_method", call_method),
            (builder, "_automatic_dynamic", _automatic_dynamic),
            (builder.VariableBuilder, "wrap_symint", wrap_symint),
        ):
            _installed[(owner, attr)] = getattr(owner, attr)
            setattr(owner, attr, wrapper)


def uninstall() -> None:
    """Restore Dynamo's own handlers."""
    with _install_lock:
        for (owner, attr), original in _installed.items():
            setattr(owner, attr, original)
        _installed.clear()
