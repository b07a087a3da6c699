"""InPlaceToOutOfPlacePass: in-place ops become their functional forms, with a copy back.

``x.add_(1)`` becomes ``t = x.add(1)``; every later read of ``x`` (and of the in-place node, which
returned ``x``) reads ``t`` instead. Where the caller can observe the mutation, because the written
tensor is a graph input, a parameter or a buffer, one ``x.copy_(t_final)`` is placed at the end of
the graph, before the replayed output aliases of :mod:`aliasing_pass` (which then read the input's
final value, as eager's views would).

Accepted spellings: tensor methods ending in ``_`` (``index_copy_``), ``torch.relu_``-style
functions, ``inplace=True`` keyword arguments, augmented assignment (``operator.iadd``) and
in-place ATen overloads (``aten.add_.Tensor``).

Left in place, on purpose (AOT Autograd's functionalization handles them correctly later):

- a write into a view (``x[0].zero_()``, ``x.view(-1).add_(1)``): the base must be updated too;
- a write into a tensor that has a view read after the write: the view must see the new data;
- ``operator.setitem`` (``x[i] = v``), which has no single out-of-place op;
- a write into a graph input that shares storage with another input (the caller passed ``x`` and
  ``x[0]``), as far as Dynamo's recorded example values tell;
- ops that change shape or strides (``unsqueeze_``, ``t_``, ``resize_``, ...).

Each skip is recorded in ``gm.meta["fx_inplace_kept"]`` with its reason; each rewrite in
``gm.meta["fx_inplace_rewrites"]``. An in-place op with no out-of-place form raises
:class:`FXPassError` naming the node.
"""

from __future__ import annotations

import contextlib
import operator

import torch
from torch.fx import GraphModule, Node

from reference.core.torch_compat import OpOverload
from reference.fx_passes import _graph
from reference.fx_passes.aliasing_pass import ALIAS_TAG
from reference.fx_passes.base import FXPass, FXPassError, PassContext

COPY_BACK_TAG = "fx_copy_back"

# In-place ops that change a tensor's shape or strides, not only its data: no copy back can give
# the caller that, so they stay in place.
_METADATA_INPLACE = frozenset(
    {"squeeze_", "unsqueeze_", "t_", "transpose_", "resize_", "resize_as_", "as_strided_", "swapdims_",
     "swapaxes_", "set_", "detach_"}
)

# In-place methods whose functional form is not a tensor method: use the ATen op.
_ATEN_FALLBACK = {"copy_", "fill_", "zero_", "uniform_", "normal_", "bernoulli_", "exponential_", "random_"}


class InPlaceToOutOfPlacePass(FXPass):
    """Rewrites in-place ops to functional ones; copies back what the caller can observe."""

    version = 1

    def transform(self, gm: GraphModule, ctx: PassContext) -> GraphModule:
        graph_name = ctx.graph_name
        graph = gm.graph
        output = _graph.output_node(gm)
        # The copy backs go before the first replayed output alias (they must read the final value).
        copy_point = next((n for n in graph.nodes if ALIAS_TAG in n.meta), output)
        current: dict[Node, Node] = {}  # written base -> node holding its latest value
        origin: dict[Node, Node] = {}  # functional node -> the base it is the new value of
        rewrites: list[dict] = []
        kept: list[dict] = []

        for node in list(graph.nodes):
            if node.op not in ("call_function", "call_method") or node.meta.get(COPY_BACK_TAG):
                continue
            if node.op == "call_function" and node.target is operator.setitem:
                kept.append({"node": node.name, "reason": "setitem has no single out-of-place op"})
                continue
            if not _graph.is_inplace(node):
                continue
            if _op_name(node) in _METADATA_INPLACE:
                kept.append({"node": node.name, "reason": f"{_graph.describe(node)} changes shape or strides, not only data"})
                continue
            target = _graph.first_tensor_arg(node)
            if target is None:
                raise FXPassError(
                    self.name, graph_name, f"{_graph.describe(node)} writes into a value that is not a tensor in the graph", node=node.name
                )
            base, views = _graph.alias_chain(target, conservative=True)
            base = origin.get(base, base)
            if views:
                kept.append({"node": node.name, "reason": f"writes into a view of {base.name!r}"})
                continue
            if base.op == "placeholder" and base not in current:
                shared = _graph.aliased_inputs(gm, base)
                if shared:
                    kept.append({"node": node.name, "reason": f"input {base.name!r} shares storage with input {shared[0].name!r}"})
                    continue
            family = {base, current.get(base, base)}
            live_view = self._live_view(graph, node, family)
            if live_view is not None:
                kept.append({"node": node.name, "reason": f"{base.name!r} has a view {live_view.name!r} read after the write"})
                continue

            functional = self._functional(gm, node, graph_name)
            holder = current.get(base, base)
            observable = _graph.is_input(base)
            # Before the copy point every read of the written value reads the new one. After it
            # (replayed output aliases, the output) an input is read directly: the copy back has
            # given it its final value.
            # Kept in-place ops on the same tensor earlier on return it too: read like the base.
            same = {base} | self._identity_aliases(graph, node, base, origin)
            before = same | {holder, node}
            after = {node} | ({holder} - {base}) | (set() if observable else same)
            passed = False
            for later in list(_graph.nodes_after(functional)):
                if later is node:
                    continue
                passed = passed or later is copy_point
                for old in after if passed else before:
                    if old in later.all_input_nodes:
                        later.replace_input_with(old, functional)
                        # Whether it shares storage with its new input is no longer recorded.
                        later.meta[_graph.STALE_VALUE] = True
            current[base] = functional
            origin[functional] = base
            rewrites.append({"node": node.name, "op": _graph.describe(node), "base": base.name, "now": functional.name})
            graph.erase_node(node)

        for base, final in current.items():
            if not _graph.is_input(base):
                continue
            with graph.inserting_before(copy_point):
                copy = graph.call_method("copy_", (base, final))
                copy.meta[COPY_BACK_TAG] = True
            rewrites.append({"copy_back": base.name, "from": final.name})

        gm.meta["fx_inplace_rewrites"] = gm.meta.get("fx_inplace_rewrites", []) + rewrites
        gm.meta["fx_inplace_kept"] = gm.meta.get("fx_inplace_kept", []) + kept
        return _graph.finish(gm) if rewrites else gm

    @staticmethod
    def _identity_aliases(graph, node: Node, base: Node, origin: dict[Node, Node]) -> set[Node]:
        """In-place ops left in the graph before ``node`` that write ``base`` itself (they return it)."""
        found = set()
        for other in graph.nodes:
            if other is node:
                break
            if other.op in ("call_function", "call_method") and _graph.is_inplace(other):
                root, views = _graph.alias_chain(other, conservative=True)
                if not views and origin.get(root, root) is base:
                    found.add(other)
        return found

    @staticmethod
    def _live_view(graph, node: Node, family: set[Node]) -> Node | None:
        """A view of the written value made before ``node`` and read after it (it would miss the
        write). An in-place op kept on a view returns that view, so it counts as one too
        (``v = x.reshape(-1).add_(1)``, then ``x.add_(1)``, then ``v`` read)."""
        after = set(_graph.nodes_after(node))
        for other in graph.nodes:
            if other is node:
                break
            if other.op in ("call_function", "call_method") and (_graph.may_alias(other) or _graph.is_inplace(other)):
                root, views = _graph.alias_chain(other, conservative=True)
                if root in family and views and any(u in after and ALIAS_TAG not in u.meta for u in other.users):
                    return other
        return None

    def _functional(self, gm: GraphModule, node: Node, graph_name: str) -> Node:
        graph = gm.graph
        args, kwargs = node.args, dict(node.kwargs)
        with graph.inserting_before(node):
            if node.op == "call_method":
                name = str(node.target)[:-1]
                if node.target not in _ATEN_FALLBACK and hasattr(torch.Tensor, name):
                    new = graph.call_method(name, args, kwargs)
                elif hasattr(torch.ops.aten, name):
                    new = graph.call_function(getattr(torch.ops.aten, name), args, kwargs)
                else:
                    raise self._no_form(node, graph_name)
            elif node.target in _graph.INPLACE_OPERATORS:
                new = graph.call_function(_graph.INPLACE_OPERATORS[node.target], args, kwargs)
            elif kwargs.get("inplace") is True:
                kwargs["inplace"] = False
                new = graph.call_function(node.target, args, kwargs)
            elif isinstance(node.target, OpOverload):
                packet = getattr(torch.ops.aten, node.target._schema.name.split("::")[1][:-1], None)
                overload = getattr(packet, node.target._overloadname, None) if packet is not None else None
                if overload is None:
                    raise self._no_form(node, graph_name)
                new = graph.call_function(overload, args, kwargs)
            else:
                name = node.target.__name__[:-1]
                fn = getattr(torch, name, None) or getattr(torch.ops.aten, name, None)  # torch.zero_: aten.zero
                if fn is None:
                    raise self._no_form(node, graph_name)
                new = graph.call_function(fn, args, kwargs)
        if "stack_trace" in node.meta:
            new.meta["stack_trace"] = node.meta["stack_trace"]
        return _keep_dtype(graph, node, new)

    def _no_form(self, node: Node, graph_name: str) -> FXPassError:
        return FXPassError(
            self.name,
            graph_name,
            f"in-place op {_graph.describe(node)} has no out-of-place form this pass knows; write it out of "
            "place, or compile with options={'enable_fx_passes': False}",
            node=node.name,
        )


def _op_name(node: Node) -> str:
    if node.op == "call_method":
        return str(node.target)
    if isinstance(node.target, OpOverload):
        return node.target._schema.name.split("::")[1]
    return getattr(node.target, "__name__", "")


def _example(node: Node):
    return node.meta.get("example_value", node.meta.get("val")) if isinstance(node, Node) else node


def _keep_dtype(graph, inplace: Node, new: Node) -> Node:
    """An in-place op's result keeps its tensor's dtype; the functional form may promote
    (``half.mul_(float)`` stays half, ``half.mul(float)`` is float). With Dynamo's recorded example
    values, evaluate the functional form on them and cast back where the dtype differs."""
    before = _example(inplace)
    if not isinstance(before, torch.Tensor):
        return new  # no recorded values (a hand-built graph): nothing to compare with
    fake_mode = getattr(before, "fake_mode", None)
    try:
        args = torch.fx.node.map_arg(new.args, _example)
        kwargs = torch.fx.node.map_arg(new.kwargs, _example)
        with fake_mode if fake_mode is not None else contextlib.nullcontext():
            after = getattr(args[0], new.target)(*args[1:], **kwargs) if new.op == "call_method" else new.target(*args, **kwargs)
    except Exception:  # values we cannot evaluate on: keep the functional form as it is
        return new
    if not isinstance(after, torch.Tensor):
        return new
    new.meta["example_value"] = after
    if after.dtype == before.dtype:
        return new
    with graph.inserting_after(new):
        cast = graph.call_method("to", (new, before.dtype))
    cast.meta["example_value"] = before
    return cast
