"""Graph breaks the backend forces while Dynamo traces.

Some calls cannot be compiled by the backend, so Dynamo must leave them out of the graph: they run
eagerly between two compiled graphs (``fullgraph=False``), or the compile fails with
``torch._dynamo.exc.Unsupported`` whose ``gb_type`` is :data:`GB_TYPE` (``fullgraph=True``). The
rules, for the function form (``torch.sort(x)``) and the method form (``x.sort()``) alike:

- ``sort`` / ``argsort``: when the sorted dimension has more than ``sort`` (16,384) elements;
- ``topk``: when ``k`` is ``topk`` (16,384) or larger;
- ``grouped_mm`` (``torch.nn.functional.grouped_mm``, ``torch._grouped_mm``): always;
- every op with no lowering: always.

The ops with no lowering are not listed by hand; :mod:`reference.lowering.no_lowering` computes them
from the installed tools.

Shapes are static for these backends: while Dynamo traces for them, automatic dynamic shapes are
off (unless the caller asked for ``dynamic=True``, which the backend then rejects), so a new input
shape recompiles with static sizes and the size-dependent rules above can decide.

The rules apply only to compiles whose backend opted in with :func:`forces_graph_breaks` (the
reference's seams); other backends in the same process trace as usual.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import Any, Callable

import torch

from reference.core.errors import BackendOptionError
from reference.lowering.no_lowering import no_lowering_ops

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
    reason = no_lowering_ops().get(name)
    if reason is not None:
        return BreakDecision(name, reason)
    return None


# --- the Dynamo hook ----------------------------------------------------------------------------

_OPT_IN = "_neuron_forces_graph_breaks"


def forces_graph_breaks(backend: Callable) -> Callable:
    """Mark a backend function so that compiles using it get the backend's graph breaks."""
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
    """A Python value for a VariableTracker: the fake tensor of a tensor, else the constant."""
    from torch._dynamo.variables.tensor import TensorVariable

    if isinstance(var, TensorVariable):
        return var.proxy.node.meta.get("example_value")
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
    if name not in _SIZE_RULES and name not in ALWAYS_BREAK and name not in no_lowering_ops():
        return  # the common case: nothing to decide, no values to read
    if not _backend_opted_in(tx):
        return
    values = [_python_value(a) for a in args]
    kw = {k: _python_value(v) for k, v in kwargs.items()}
    decision = decide(name, values, kw)
    if decision is not None:
        _raise(decision, form)


def _static_for_opted_in(tx):
    import contextlib

    cfg = torch._dynamo.config
    if cfg.automatic_dynamic_shapes and cfg.assume_static_by_default and _backend_opted_in(tx):
        return cfg.patch(automatic_dynamic_shapes=False)
    return contextlib.nullcontext()


_installed = False
_install_lock = threading.Lock()


def install() -> None:
    """Wrap Dynamo's handlers of torch function calls and tensor method calls (idempotent).

    The no-lowering list is computed here, before any trace, so that the hook only reads it."""
    global _installed
    with _install_lock:
        if _installed:
            return
        no_lowering_ops()
        from torch._dynamo.variables.tensor import TensorVariable
        from torch._dynamo.variables.torch import TorchInGraphFunctionVariable

        orig_fn = TorchInGraphFunctionVariable.call_function
        orig_method = TensorVariable.call_method

        @functools.wraps(orig_fn)
        def call_function(self, tx, args, kwargs):
            name = getattr(self.value, "__name__", None)
            if isinstance(name, str):
                _check(tx, name, list(args), dict(kwargs), f"torch.{name}()")
            return orig_fn(self, tx, args, kwargs)

        @functools.wraps(orig_method)
        def call_method(self, tx, name, args, kwargs):
            if isinstance(name, str) and not name.startswith("__"):
                _check(tx, name, [self, *args], dict(kwargs), f"Tensor.{name}()")
            return orig_method(self, tx, name, args, kwargs)

        TorchInGraphFunctionVariable.call_function = call_function
        TensorVariable.call_method = call_method

        from torch._dynamo.variables import builder

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

        builder._automatic_dynamic = _automatic_dynamic
        builder.VariableBuilder.wrap_symint = wrap_symint
        _installed = True
