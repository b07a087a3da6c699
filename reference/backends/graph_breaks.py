"""Graph breaks the backend forces while Dynamo traces.

Some calls cannot be compiled by the backend, so Dynamo must leave them out of the graph: they run
eagerly between two compiled graphs (``fullgraph=False``), or the compile fails with
Dynamo's ``Unsupported`` whose ``gb_type`` is :data:`GB_TYPE` (``fullgraph=True``). The
rules, for the function form (``torch.sort(x)``) and the method form (``x.sort()``) alike:

- ``sort`` / ``argsort``: when the sorted dimension has more than ``sort`` (16,384) elements;
- ``topk``: when ``k`` is ``topk`` (16,384) or larger;
- ``grouped_mm`` (``torch.nn.functional.grouped_mm``, ``torch._grouped_mm``): always;
- every op in the checked-in op table: always. Those are the ops that, called alone on a small
  input, do not lower, compile, run and match eager with the installed tools
  (:mod:`reference.lowering.optable` generates the table; this module only reads it);
- a call that failed to lower or compile before, with values of the same key (its op, the dtype
  and rank class of each tensor, its constants): learned from the failure
  (:mod:`reference.backends.lowering_fallback`), for torch functions, tensor methods and operators
  (``1 / x``) alike; the diagnostic names the ATen op and what stopped it;
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

The rules apply only to frames Dynamo traces for a backend that opted in with
:func:`forces_graph_breaks` (the reference's seams): the hooks read the backend Dynamo holds for the
frame being traced, so Inductor, eager or any other backend in the same process traces as if they
were not there. They are installed by the opted-in backend on its first use, never at import.
"""

from __future__ import annotations

import functools
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import torch

from reference.core import torch_compat
from reference.backends import lowering_fallback
from reference.core.build_settings import CacheRoots
from reference.core.errors import BackendOptionError, NEFFCompilationError
from reference.core.torch_compat import (
    DYNAMO_HOOKS, OpOverload, OpOverloadPacket, RetraceRequest, graph_break, python_value, trace_attempt,
    resolve_packet_overload, traced_backends,
)
from reference.fx_passes.backend_config_pass import inlined_implementation
from reference.lowering.lowering_probe import DECISIONS as LEARNED
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


# --- the Dynamo hooks ---------------------------------------------------------------------------

# The backends that opted in (weakly held: a tool's throw-away backend goes when it does).
_OPTED_IN: "weakref.WeakSet[Callable]" = weakref.WeakSet()


def forces_graph_breaks(backend: Callable) -> Callable:
    """``backend`` as a backend whose graphs get the rules above; returns the function to hand
    ``torch.compile``.

    Nothing is installed by this call (it may run at import, as a decorator). The returned
    function, on its first call, installs the Dynamo hooks (:func:`install`). Dynamo calls a
    backend only after it has traced, so a graph can reach it traced without the hooks: the
    process's first graph, or a graph another thread was tracing while the first installed them.
    So whenever the graph holds a call the rules break on (:func:`breaking_call`, decided on the
    graph's own nodes and example values), the backend has Dynamo trace that frame again, now with
    the hooks in place (:class:`~reference.core.torch_compat.RetraceRequest`), on the compile's
    first trace only: a graph that holds such a call after a restart is compiled as it is (no
    loop)."""

    @functools.wraps(backend)
    def opted_in(gm: torch.fx.GraphModule, example_inputs: list, **kwargs: Any):
        hooked = DYNAMO_HOOKS.installed() or install()
        if hooked:
            _load_learned()
            decision = breaking_call(gm)
            if decision is not None and trace_attempt() == 0:
                raise RetraceRequest(
                    f"the graph holds {decision.op}, which the neuron backend breaks on: traced before its "
                    "graph-break hooks were installed"
                )
        try:
            return backend(gm, example_inputs, **kwargs)
        except NEFFCompilationError as exc:
            # A call that does not lower or compile: learn which (decompose it, or break the graph
            # at it) and trace the frame again; a failure with nothing new to learn stands.
            if hooked and trace_attempt() is not None and lowering_fallback.learn(gm, exc):
                raise RetraceRequest(f"a call of the graph does not lower: {str(exc).splitlines()[0][:200]}") from exc
            raise

    _OPTED_IN.add(opted_in)
    return opted_in


def _backend_opted_in(tx) -> bool:
    """Whether the frame ``tx`` traces is compiled for an opted-in backend (the backend Dynamo holds
    for the frame: known while it traces)."""
    return any(_opted_in(fn) for fn in traced_backends(tx))


def _opted_in(fn: Any) -> bool:
    try:
        return fn in _OPTED_IN
    except TypeError:  # not hashable (torch.compile's options wrapper defines __eq__ only)
        return False


def _raise(decision: BreakDecision, form: str) -> None:
    graph_break(
        gb_type=GB_TYPE,
        context=f"op={decision.op} ({form}): {decision.reason}",
        explanation=f"The Neuron backend cannot compile {form}: {decision.reason}. "
        "With fullgraph=False the call runs eagerly between compiled graphs.",
        hints=[
            "Use fullgraph=False to let this op run eagerly, or move it outside the compiled region.",
        ],
    )


_SIZE_RULES = ("sort", "argsort", "topk")


def _candidate(name: str) -> bool:
    return name in _SIZE_RULES or name in ALWAYS_BREAK or name in break_ops()


def _overload(op, args: list, kwargs: dict) -> OpOverload | None:
    """The overload a call of ``op`` (an overload, or a packet resolved from the call's values)
    runs."""
    if isinstance(op, OpOverload):
        return op
    name = resolve_packet_overload(op, args, kwargs)
    if name is None:  # values the schema matcher cannot take: the packet's usual overload
        names = op.overloads()
        name = "default" if "default" in names else (names[0] if names else None)
    return getattr(op, name or "default", None)


def _ruled(target: Any) -> tuple[str, str] | None:
    """The rule name of a call of ``target`` (a method name, a torch function, or an op) and the
    form a diagnostic names it by, when the rules may break on it; ``None`` (the common case) when
    there is nothing to decide, so no argument value needs to be read. ATen ops go by the op
    table's rules; ops of another (not core) namespace by whether they lower."""
    if isinstance(target, str):  # a tensor method
        return (target, f"Tensor.{target}()") if _candidate(target) else None
    if isinstance(target, (OpOverload, OpOverloadPacket)):
        namespace = namespace_of(target)
        name = (target.overloadpacket if isinstance(target, OpOverload) else target).__name__
        if namespace == "aten":
            return (name, f"torch.ops.aten.{name}()") if _candidate(name) else None
        return None if namespace in CORE_NAMESPACES else (name, f"torch.ops.{namespace}.{name}()")
    name = getattr(target, "__name__", None)
    return (name, f"torch.{name}()") if isinstance(name, str) and _candidate(name) else None


def _decision(target: Any, name: str, values: list, kwargs: dict) -> BreakDecision | None:
    """Whether the call of ``target`` (ruled by :func:`_ruled` under ``name``) with these Python
    values (tensors as fake or real tensors) breaks the graph, and why."""
    if isinstance(target, (OpOverload, OpOverloadPacket)) and namespace_of(target) != "aten":
        overload = _overload(target, values, kwargs)
        if overload is None:
            return None
        made = DECISIONS.decide(overload, values, kwargs, inline_impl=inlined_implementation(overload))
        return None if made.lowers else BreakDecision(made.op, made.reason)
    return decide(name, values, kwargs)


def _load_learned() -> None:
    """The lowering decisions kept beside the HLO cache (read once per folder and process)."""
    try:
        roots = CacheRoots.from_env()
    except Exception:  # noqa: BLE001 - a bad setting is the compile request's to report, not this read's
        return
    lowering_fallback.load_decisions(roots)


def _form(target: Any) -> str:
    """How a diagnostic names a call of ``target``."""
    if isinstance(target, str):
        return f"Tensor.{target}()"
    if isinstance(target, (OpOverload, OpOverloadPacket)):
        return f"torch.ops.{target}()"
    name = getattr(target, "__name__", None) or type(target).__name__
    module = getattr(target, "__module__", "") or ""
    return f"{'operator' if module in ('_operator', 'operator') else 'torch'}.{name}()"


def _learned(target: Any, values: list, kwargs: dict) -> BreakDecision | None:
    """A break the backend learned for this call (:mod:`reference.backends.lowering_fallback`)."""
    made = LEARNED.break_for(target, values, kwargs)
    return None if made is None else BreakDecision(made.op, made.reason)


def _check(tx, target: Any, args: list, kwargs: dict, *, rules: bool = True) -> None:
    """The hooks' body: a call of ``target`` with Dynamo's ``args`` while ``tx`` traces.
    ``rules=False``: only the learned breaks apply (an operator or builtin)."""
    ruled = _ruled(target) if rules else None
    learned = LEARNED.breaks_on(target)
    if (ruled is None and not learned) or not _backend_opted_in(tx):
        return
    values, kw = [python_value(a) for a in args], {k: python_value(v) for k, v in kwargs.items()}
    decision = _learned(target, values, kw) if learned else None
    if decision is not None:
        _raise(decision, _form(target))
    if ruled is None:
        return
    decision = _decision(target, ruled[0], values, kw)
    if decision is not None:
        _raise(decision, ruled[1])


def _on_function(tx, fn: Any, args: list, kwargs: dict) -> None:
    _check(tx, fn, args, kwargs)


def _on_method(tx, name: str, args: list, kwargs: dict) -> None:
    _check(tx, name, args, kwargs)


def _on_builtin(tx, fn: Any, args: list, kwargs: dict) -> None:
    _check(tx, fn, args, kwargs, rules=False)


def _example(arg: Any) -> Any:
    """A node argument as the hooks would see it: a graph value as its example (fake) tensor."""
    if isinstance(arg, torch.fx.Node):
        return arg.meta.get("example_value")
    if isinstance(arg, (list, tuple)):
        return type(arg)(_example(a) for a in arg)
    return arg


def breaking_call(gm: torch.fx.GraphModule) -> BreakDecision | None:
    """The first call in a Dynamo graph that the rules break on, decided as the hooks decide it
    while tracing (the same rules, with the arguments' example values); ``None`` for a graph the
    hooks would have left whole. A graph the hooks traced holds none."""
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        ruled = _ruled(node.target)
        learned = LEARNED.breaks_on(node.target)
        if ruled is None and not learned:
            continue
        values = [_example(a) for a in node.args]
        kwargs = {k: _example(v) for k, v in node.kwargs.items()}
        decision = _learned(node.target, values, kwargs) if learned else None
        if decision is None and ruled is not None:
            decision = _decision(node.target, ruled[0], values, kwargs)
        if decision is not None:
            return decision
    return None



#: The torch releases whose Dynamo internals the hooks were written against.
WRITTEN_FOR = torch_compat.WRITTEN_FOR


def installed() -> bool:
    return DYNAMO_HOOKS.installed()


def install() -> bool:
    """Wrap Dynamo's handlers of torch function calls and tensor method calls, and its automatic
    dynamic shapes (idempotent); the backends of :func:`forces_graph_breaks` call it on first use.

    The wrapped handlers act only while Dynamo traces a frame for an opted-in backend; for any
    other backend (Inductor, eager, aot_eager) they call Dynamo's own at once. Only on the torch
    releases in :data:`WRITTEN_FOR`: on another one the hooks stay out with a
    :class:`~reference.core.torch_compat.TorchVersionWarning` (an op with no lowering then fails
    the compile with a ``LoweringError`` instead of breaking the graph) and this returns False.
    Installing computes nothing: the list of ops with no lowering is read on the first trace that
    needs it. :func:`uninstall` restores Dynamo's handlers until the next :func:`install`."""
    return DYNAMO_HOOKS.install(_on_function, _on_method, _backend_opted_in, on_builtin=_on_builtin)


def uninstall() -> None:
    """Restore Dynamo's own handlers."""
    DYNAMO_HOOKS.uninstall()
