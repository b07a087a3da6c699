"""Graph helpers shared by the passes: what a node is, what it aliases, where it sits.

The passes run on Dynamo's graph, which mixes three spellings of the same op: tensor methods
(``call_method "add_"``), torch functions (``torch.relu_``, ``operator.iadd``) and ATen overloads
(``torch.ops.aten.add_.Tensor``, from hand-built or re-traced graphs). These helpers answer the
questions the passes ask in all three spellings.

Aliasing here is structural and conservative: an op that *may* return a view of its first
argument (``reshape``, ``contiguous``, ``to``) counts as a view. Treating a copy as a view only
makes the in-place rewrite skip a node it could have rewritten, and a view replayed by the
aliasing rewrite gives the caller exactly what eager gives; treating a view as a copy would be
wrong, so the table errs the other way.
"""

from __future__ import annotations

import operator
from typing import Iterator

import torch
from torch.fx import GraphModule, Node

# Tensor methods (and their torch.* function twins) whose result may share storage with the
# first argument.
VIEW_METHODS = frozenset(
    {
        "view", "view_as", "reshape", "reshape_as", "transpose", "t", "permute", "expand", "expand_as",
        "unsqueeze", "squeeze", "flatten", "unflatten", "narrow", "select", "as_strided", "detach",
        "diagonal", "movedim", "moveaxis", "swapaxes", "swapdims", "unfold", "split", "split_with_sizes",
        "chunk", "unbind", "tensor_split", "contiguous", "to", "type", "type_as", "float", "double",
        "half", "bfloat16", "int", "long", "short", "bool", "char", "byte", "cpu", "real", "imag",
        "view_as_real", "view_as_complex", "alias", "T", "mT", "H", "mH",
    }
)

_VIEW_FUNCTIONS = {getattr(torch, name) for name in VIEW_METHODS if callable(getattr(torch, name, None))}

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
        if isinstance(t, torch._ops.OpOverload):
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
    if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
        return node.target._schema
    return None


def is_view(node: Node) -> bool:
    """Whether ``node`` may return (part of) its first argument's storage."""
    if node.op == "call_method":
        return node.target in VIEW_METHODS
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return isinstance(node.args[0], Node)
    if node.target in _VIEW_FUNCTIONS:
        return True
    schema = _overload_schema(node)
    if schema is not None and schema.returns and schema.arguments:
        ret = schema.returns[0].alias_info
        return ret is not None and not ret.is_write
    return False


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


def alias_chain(node: Node) -> tuple[Node, list[Node]]:
    """Follow views and in-place results back to the value whose storage ``node`` shares.

    Returns ``(base, views)``: ``views`` lists the view nodes from the base outward (in-place
    results are skipped: they *are* their first argument).
    """
    views: list[Node] = []
    cur = node
    seen = set()
    while cur not in seen:
        seen.add(cur)
        if is_inplace(cur) or is_view(cur):
            src = first_tensor_arg(cur)
            if src is None:
                break
            if is_view(cur):
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
