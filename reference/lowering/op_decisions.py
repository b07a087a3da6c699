"""Whether an op of any namespace lowers, decided once per op and tool versions.

The checked-in op table (:mod:`reference.lowering.optable`) covers the ATen ops a user reaches as
``torch.<name>`` or ``Tensor.<name>``. Every other namespace (custom ops that libraries or the user
register with ``torch.library``: ``transformers::grouped_mm_fallback``, an ATOM op registered with
``direct_register_custom_op``, ...) is decided here, the same way: an op lowers when

1. the backend has a lowering of its own for it (an entry of
   :func:`reference.lowering.decompositions.extra_decompositions`, or of
   :func:`~reference.lowering.decompositions.library_lowerings` for another library's op, such as
   ``transformers::grouped_mm_fallback``), or
2. it has a decomposition to ops that lower: a ``CompositeImplicitAutograd`` kernel (the
   dispatcher decomposes it while AOT Autograd traces), or, for a kernel that writes into a
   caller's buffer, the Python implementation the FX pass inlines (the caller passes it as
   ``inline_impl``). The decomposition is traced on fake tensors shaped like the call's, with the
   backend's decomposition table, and must contain no op of the no-lowering table and no op of
   another namespace, and must lower to StableHLO with torch-mlir (lowering only: nothing is
   compiled or run).

Otherwise it does not lower, and the graph-break rules break the graph at it, before anything is
compiled. The namespaces in :data:`CORE_NAMESPACES` are not decided here: ATen by the op table,
the collectives by the SPMD lowering.

Decisions are cached in the process (:data:`DECISIONS`), keyed on the op's qualified name and
schema, what is registered for it (a composite kernel, the implementation to inline), the dtypes
of its tensor arguments and the tool versions (:func:`reference.cache.key.tool_versions`): the
first call of an op with those dtypes decides it, later calls only look it up.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from reference.cache.key import tool_versions
from reference.core.errors import LoweringError
from reference.core.torch_compat import FakeTensorMode, OpOverload, OpOverloadPacket, has_composite_implicit_kernel, pytree
from reference.lowering.decompositions import extra_decompositions, library_lowerings
from reference.lowering.optable import break_ops

#: Namespaces decided elsewhere: ATen by the op table, ``prims`` lower, the collectives are the
#: SPMD lowering's, higher-order ops are Dynamo's own.
CORE_NAMESPACES = frozenset({"aten", "prims", "c10d", "c10d_functional", "_c10d_functional",
                             "_c10d_functional_autograd", "higher_order"})


@dataclass(frozen=True)
class OpDecision:
    """``op`` (qualified: ``namespace::name`` or ``namespace::name.overload``) lowers or not;
    ``reason`` says how it lowers, or why it does not."""

    op: str
    lowers: bool
    reason: str


def qualified_name(op: OpOverload) -> str:
    """``namespace::name`` for an op's default overload, ``namespace::name.overload`` otherwise."""
    name = op._schema.name
    return f"{name}.{op._overloadname}" if op._overloadname not in ("default", "") else name


def namespace_of(op: OpOverload | OpOverloadPacket) -> str:
    return op.namespace if isinstance(op, OpOverload) else op._qualified_op_name.split("::")[0]


def has_composite_implicit(op: OpOverload) -> bool:
    """Whether the dispatcher decomposes ``op`` itself (a ``CompositeImplicitAutograd`` kernel,
    registered in C++ or from Python)."""
    return has_composite_implicit_kernel(op)


def _signature(values: Sequence[Any]) -> tuple:
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append(str(v.dtype))
        elif isinstance(v, (list, tuple)):
            out.append(_signature(v))
    return tuple(out)


def _fresh(value: Any, mode) -> Any:
    """A fake tensor of ``mode`` shaped like ``value`` (itself a fake tensor of Dynamo's trace)."""
    if isinstance(value, torch.Tensor):
        with mode:
            return torch.empty_strided(tuple(int(s) for s in value.shape), tuple(int(s) for s in value.stride()),
                                       dtype=value.dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_fresh(v, mode) for v in value)
    return value


class OpDecisions:
    """The process's decisions; one small object with :meth:`decide` and :meth:`clear`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._decided: dict[tuple, OpDecision] = {}
        self.probes = 0  # decompositions traced and lowered (a cached decision is not a probe)

    def clear(self) -> None:
        with self._lock:
            self._decided.clear()
            self.probes = 0

    def decide(self, op: OpOverload, args: Sequence[Any], kwargs: dict[str, Any],
               *, inline_impl: Callable | None = None) -> OpDecision:
        """Whether ``op`` called with ``args``/``kwargs`` (fake tensors and Python values, as Dynamo
        traces them) lowers. ``inline_impl``: the implementation the FX passes inline for a kernel
        that writes into a caller's buffer (``None`` for any other op)."""
        name = qualified_name(op)
        composite = has_composite_implicit(op)
        key = (name, str(op._schema), composite, id(inline_impl) if inline_impl else None,
               _signature([*args, *kwargs.values()]), tuple(sorted(tool_versions().items())))
        with self._lock:
            known = self._decided.get(key)
        if known is not None:
            return known
        decision = self._decide(op, name, composite, args, kwargs, inline_impl)
        with self._lock:
            self._decided[key] = decision
        return decision

    def _decide(self, op, name: str, composite: bool, args, kwargs, inline_impl) -> OpDecision:
        if op in extra_decompositions() or op in library_lowerings():
            return OpDecision(name, True, "the backend lowers it")
        if composite:
            via, fn = "its CompositeImplicitAutograd kernel", op
        elif inline_impl is not None:
            via, fn = "its implementation (a kernel writing into a buffer, inlined)", inline_impl
        else:
            return OpDecision(
                name, False,
                "it has no lowering on this backend and no decomposition to ops that lower "
                "(no CompositeImplicitAutograd kernel)",
            )
        with self._lock:
            self.probes += 1
        problem = _probe(name, fn, args, kwargs)
        if problem:
            return OpDecision(name, False, f"it decomposes through {via}, but {problem}")
        return OpDecision(name, True, f"it decomposes through {via} to ops that lower")


def _probe(name: str, fn: Callable, args: Sequence[Any], kwargs: dict[str, Any]) -> str | None:
    """Trace ``fn(*args, **kwargs)`` to ATen ops and lower the graph; ``None`` when it lowers,
    else what stops it."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from reference.lowering.stablehlo import decomposition_table, lower_to_stablehlo

    mode = FakeTensorMode()
    flat, spec = pytree.tree_flatten((list(args), dict(kwargs)))
    slots = [i for i, v in enumerate(flat) if isinstance(v, torch.Tensor)]
    try:
        fresh = [_fresh(flat[i], mode) for i in slots]
    except Exception as exc:  # noqa: BLE001 - sizes that are not plain ints: nothing to trace with
        return f"its arguments cannot be traced with ({_first_line(exc)})"

    def call(*tensors):
        values = list(flat)
        for i, t in zip(slots, tensors):
            values[i] = t
        a, kw = pytree.tree_unflatten(values, spec)
        # The inputs are outputs too (what a kernel writes into its buffer is part of its result);
        # only tensors: lowering returns tensors.
        leaves = pytree.tree_leaves((fn(*a, **kw), tensors))
        return tuple(t for t in leaves if isinstance(t, torch.Tensor))

    try:
        with mode:
            gm = make_fx(torch.func.functionalize(call, remove="mutations_and_views"),
                         decomposition_table={**decomposition_table(), **library_lowerings()},
                         tracing_mode="real")(*fresh)
    except Exception as exc:  # noqa: BLE001 - a decomposition that does not trace does not lower
        return f"it could not be traced ({_first_line(exc)})"
    _drop_input_write_backs(gm)
    table = break_ops()
    for node in gm.graph.nodes:
        target = node.target
        if node.op != "call_function" or not isinstance(target, OpOverload):
            continue
        ns = target.namespace
        if ns not in CORE_NAMESPACES:
            return f"it calls {qualified_name(target)}, which has no lowering"
        if ns == "aten" and target.overloadpacket.__name__ in table:
            return f"it calls aten.{target.overloadpacket.__name__}: {table[target.overloadpacket.__name__]}"
    try:
        lower_to_stablehlo(gm, graph_name=f"op_{name.replace('::', '_').replace('.', '_')}")
    except LoweringError as exc:
        return "torch-mlir cannot lower it: " + (", ".join(exc.ops) or str(exc).splitlines()[0][:160])
    except Exception as exc:  # noqa: BLE001 - any other failure to lower is a failure to lower
        return f"it does not lower ({_first_line(exc)})"
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:160]}" if text else type(exc).__name__


def _drop_input_write_backs(gm: torch.fx.GraphModule) -> None:
    """Functionalization ends the graph with ``copy_`` into each written input; the graph already
    returns the written values, and lowering takes value semantics only."""
    for node in reversed(list(gm.graph.nodes)):
        if (node.op == "call_function" and node.target is torch.ops.aten.copy_.default and not node.users
                and node.args[0].op == "placeholder"):
            gm.graph.erase_node(node)
    gm.recompile()


#: The process's decisions.
DECISIONS = OpDecisions()
