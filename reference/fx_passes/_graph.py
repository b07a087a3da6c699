"""Graph helpers shared by the passes: what a node is, what it aliases, where it sits.

The passes run on Dynamo's graph, which mixes three spellings of the same op: tensor methods
(``call_method "add_"``), torch functions (``torch.relu_``, ``operator.iadd``) and ATen overloads
(``torch.ops.aten.add_.Tensor``, from hand-built or re-traced graphs). These helpers answer the
questions the passes ask in all three spellings.

Aliasing here is structural. Some ops always return a view (``view``, ``t``, basic indexing);
some return a view or a copy depending on the tensor (``reshape``, ``contiguous``, ``to``). Where
Dynamo recorded example values, their storages decide; where it did not, the answer depends on
who asks: :func:`is_view` says "no" (replaying a copy after a later write would change its value)
and :func:`may_alias` says "yes" (rewriting a write that a view would have seen would be wrong).
"""

from __future__ import annotations

import operator
from typing import Iterator

import torch
from torch.fx import GraphModule, Node

from reference.core.torch_compat import OpOverload

# Tensor methods (and their torch.* function twins) whose result always shares storage with the
# first argument.
VIEW_METHODS = frozenset(
    {
        "view", "view_as", "transpose", "t", "permute", "expand", "expand_as", "unsqueeze", "squeeze",
        "unflatten", "narrow", "select", "as_strided", "detach", "diagonal", "movedim", "moveaxis",
        "swapaxes", "swapdims", "unfold", "split", "split_with_sizes", "chunk", "unbind", "tensor_split",
        "real", "imag", "view_as_real", "view_as_complex", "alias", "T", "mT", "H", "mH",
    }
)

# Ops that return a view of their first argument or a copy, depending on its layout, dtype or
# device (``reshape`` of a contiguous tensor is a view, of a transposed one a copy).
MAYBE_VIEW_METHODS = frozenset(
    {
        "reshape", "reshape_as", "flatten", "contiguous", "to", "type", "type_as", "float", "double",
        "half", "bfloat16", "int", "long", "short", "bool", "char", "byte", "cpu",
    }
)

_VIEW_FUNCTIONS = {getattr(torch, name) for name in VIEW_METHODS if callable(getattr(torch, name, None))}
_MAYBE_VIEW_FUNCTIONS = {getattr(torch, name) for name in MAYBE_VIEW_METHODS if callable(getattr(torch, name, None))}

# Python's augmented assignment on tensors: mutates the left operand and returns it.
INPLACE_OPERATORS: dict = {
    operator.iadd: operator.add,
    operator.isub: operator.sub,
    operator.imul: operator.mul,
    operator.itruediv: operator.truediv,
    operator.ifloordiv: operator.floordiv,
    operator.imod: operator.mod,
    operator.ipow: operator.pow,
    operator.iand: operator.and_,
    operator.ior: operator.or_,
    operator.ixor: operator.xor,
    operator.ilshift: operator.lshift,
    operator.irshift: operator.rshift,
    operator.imatmul: operator.matmul,
}

# Dunder and bookkeeping methods that end in "_" but do not write tensor data.
_NOT_DATA_MUTATIONS = frozenset({"requires_grad_", "retain_grad_", "share_memory_", "record_stream_"})


def is_input(node: Node) -> bool:
    """A value the caller can observe after the call: a graph input, parameter or buffer."""
    return node.op in ("placeholder", "get_attr")


def describe(node: Node) -> str:
    """A short spelling of a node's op for messages and snapshots."""
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    if node.op == "call_function":
        t = node.target
        if isinstance(t, OpOverload):
            return str(t)
        mod = getattr(t, "__module__", None) or ""
        name = getattr(t, "__name__", repr(t))
        if mod in ("_operator", "operator"):
            return f"operator.{name}"
        if mod.startswith("torch"):
            return f"torch.{name}" if "." not in mod.replace("torch", "", 1) else f"{mod}.{name}"
        return f"{mod}.{name}" if mod else name
    return f"{node.op}:{node.target}"


def _overload_schema(node: Node):
    if node.op == "call_function" and isinstance(node.target, OpOverload):
        return node.target._schema
    return None


def _example(node) -> object:
    return node.meta.get("example_value", node.meta.get("val")) if isinstance(node, Node) else None


# Set on a node whose inputs a pass replaced: its recorded example value describes the old inputs.
STALE_VALUE = "fx_example_value_stale"


def _shares_storage(node: Node) -> bool | None:
    """Whether Dynamo's recorded values say ``node`` shares storage with its first argument
    (``None``: unknown)."""
    if node.meta.get(STALE_VALUE):
        return None
    src = first_tensor_arg(node)
    a, b = _example(node), _example(src)
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return None
    from torch.multiprocessing.reductions import StorageWeakRef

    try:
        return StorageWeakRef(a.untyped_storage()) == StorageWeakRef(b.untyped_storage())
    except Exception:  # a tensor without storage (a sparse or nested value): unknown
        return None


def aliased_inputs(gm: GraphModule, node: Node) -> list[Node]:
    """Other graph inputs that Dynamo's recorded values say share storage with input ``node``
    (a caller passing ``x`` and ``x[0]``). Without recorded values: none known."""
    val = _example(node)
    if not isinstance(val, torch.Tensor):
        return []
    from torch.multiprocessing.reductions import StorageWeakRef

    try:
        ref = StorageWeakRef(val.untyped_storage())
    except Exception:
        return []
    out = []
    for other in gm.graph.find_nodes(op="placeholder"):
        ov = _example(other)
        if other is not node and isinstance(ov, torch.Tensor):
            try:
                if StorageWeakRef(ov.untyped_storage()) == ref:
                    out.append(other)
            except Exception:
                continue
    return out


def _basic_index(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return all(i is None or i is Ellipsis or isinstance(i, (int, slice)) for i in items)


def _view_kind(node: Node) -> str | None:
    """``"view"``, ``"maybe"`` or ``None`` (a fresh value) for what ``node`` returns."""
    if node.op == "call_method":
        if node.target in VIEW_METHODS:
            return "view"
        return "maybe" if node.target in MAYBE_VIEW_METHODS else None
    if node.op != "call_function":
        return None
    if node.target is operator.getitem:
        src = node.args[0]
        if not isinstance(src, Node):
            return None
        if _view_kind(src) == "view" and isinstance(node.args[1], int):  # an item of split/chunk/unbind
            return "view"
        return "view" if _basic_index(node.args[1]) else "maybe"
    if node.target in _VIEW_FUNCTIONS:
        return "view"
    if node.target in _MAYBE_VIEW_FUNCTIONS:
        return "maybe"
    schema = _overload_schema(node)
    if schema is not None and schema.returns and schema.arguments:
        ret = schema.returns[0].alias_info
        return "view" if ret is not None and not ret.is_write else None
    return None


def is_view(node: Node) -> bool:
    """Whether ``node`` certainly returns (part of) its first argument's storage."""
    kind = _view_kind(node)
    if kind == "maybe":
        return bool(_shares_storage(node))
    return kind == "view"


def may_alias(node: Node) -> bool:
    """Whether ``node`` may return (part of) its first argument's storage."""
    kind = _view_kind(node)
    if kind == "maybe":
        return _shares_storage(node) is not False
    return kind == "view"


def is_inplace(node: Node) -> bool:
    """Whether ``node`` writes its first argument's data and returns it (``x.add_(1)``, ``x += 1``)."""
    if node.op == "call_method":
        name = str(node.target)
        return name.endswith("_") and not name.startswith("__") and name not in _NOT_DATA_MUTATIONS
    if node.op != "call_function":
        return False
    if node.target in INPLACE_OPERATORS:
        return True
    if node.kwargs.get("inplace") is True:
        return True
    schema = _overload_schema(node)
    if schema is not None:
        if schema.name.split("::")[0] != "aten" or not schema.arguments:
            return False
        first = schema.arguments[0].alias_info
        return first is not None and first.is_write and not schema.name.endswith("_out") and "out" not in [
            a.name for a in schema.arguments if a.kwarg_only
        ]
    name = getattr(node.target, "__name__", "")
    return (
        getattr(node.target, "__module__", "") in ("torch", "torch._C._VariableFunctions", None)
        and name.endswith("_")
        and not name.startswith("_")
        and name not in _NOT_DATA_MUTATIONS
    )


def first_tensor_arg(node: Node) -> Node | None:
    if node.args and isinstance(node.args[0], Node):
        return node.args[0]
    for key in ("input", "self"):
        if isinstance(node.kwargs.get(key), Node):
            return node.kwargs[key]
    return None


def alias_chain(node: Node, *, conservative: bool = False) -> tuple[Node, list[Node]]:
    """Follow views and in-place results back to the value whose storage ``node`` shares.

    Returns ``(base, views)``: ``views`` lists the view nodes from the base outward (in-place
    results are skipped: they *are* their first argument). ``conservative`` follows ops that may
    return a view (:func:`may_alias`) as well as those that certainly do (:func:`is_view`).
    """
    viewish = may_alias if conservative else is_view
    views: list[Node] = []
    cur = node
    seen = set()
    while cur not in seen:
        seen.add(cur)
        if is_inplace(cur) or viewish(cur):
            src = first_tensor_arg(cur)
            if src is None:
                break
            if viewish(cur):
                views.append(cur)
            cur = src
            continue
        break
    views.reverse()
    return cur, views


def flat_outputs(gm: GraphModule) -> list[tuple[tuple[int, ...], object]]:
    """The output node's leaves with their index paths into the (nested) output structure."""
    out = output_node(gm)
    leaves: list[tuple[tuple[int, ...], object]] = []

    def walk(x, path):
        if isinstance(x, (list, tuple)):
            for i, item in enumerate(x):
                walk(item, path + (i,))
        else:
            leaves.append((path, x))

    walk(out.args[0], ())
    return leaves


def replace_output_leaf(gm: GraphModule, path: tuple[int, ...], new: Node) -> None:
    out = output_node(gm)

    def rebuild(x, p):
        if not p:
            return new
        items = list(x)
        items[p[0]] = rebuild(items[p[0]], p[1:])
        return type(x)(items) if isinstance(x, tuple) else items

    out.args = (rebuild(out.args[0], path),) + tuple(out.args[1:])


def output_node(gm: GraphModule) -> Node:
    return next(iter(gm.graph.find_nodes(op="output")))


def positions(gm: GraphModule) -> dict[Node, int]:
    return {n: i for i, n in enumerate(gm.graph.nodes)}


def nodes_after(node: Node) -> Iterator[Node]:
    cur = node.next
    while cur.op != "root":
        yield cur
        cur = cur.next


def finish(gm: GraphModule) -> GraphModule:
    gm.graph.lint()
    gm.recompile()
    return gm
