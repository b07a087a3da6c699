"""NkiKernelWriteBackendConfigPass: kernels that write into a caller's buffer get a write-back config.

In the seeds, NKI kernels take a preallocated output buffer and write into it; the lowering has to
be told which operand is written so the compiled graph treats it as written in place. In the
reference, such a kernel is a custom op registered with ``torch.library.custom_op(...,
mutates_args=(...))``: its schema marks the written arguments (``Tensor(a!) out``).

For every call of such an op (any namespace but the core ``aten``/``prims`` ones) the pass

1. checks that every written argument is a tensor value of the graph (else :class:`FXPassError`
   naming the node and the argument),
2. attaches the configuration ``node.meta["backend_config"]``: the kernel's name and, per written
   operand, its argument name, position and the graph value that is written
   (``{"kernel": "ns::op", "write_back": [{"arg": "out", "position": 1, "buffer": "l_out_"}]}``);
   all configurations are also listed in ``gm.meta["kernel_write_back"]``,
3. hands the lowering what it can take: this reference has no custom-call lowering, so the kernel's
   Python implementation is traced to ATen ops (``make_fx``) and inlined, its write into the buffer
   staying an in-place ``copy_`` on the configured operand. AOT Autograd then makes the written
   buffer an output of the compiled graph and copies it back into the caller's tensor, which is
   what "written in place" means for a caller. The inlined nodes keep the configuration.

A kernel whose implementation cannot be traced (no Python implementation, data-dependent control
flow, ...) keeps its call and its configuration; lowering then names the op it cannot lower.
"""

from __future__ import annotations

import logging

import torch
from torch.fx import GraphModule, Node

from reference.core.torch_compat import OPDEFS, OpOverload
from reference.fx_passes import _graph
from reference.fx_passes.base import FXPass, FXPassError, PassContext

log = logging.getLogger("reference.fx_passes")

CONFIG_KEY = "backend_config"
RECORD_KEY = "kernel_write_back"
_CORE_NAMESPACES = frozenset({"aten", "prims", "_c10d_functional", "c10d", "_c10d_functional_autograd", "higher_order"})


def written_arguments(op: OpOverload) -> list[tuple[int, str]]:
    """``(position, name)`` of every argument the op's schema marks as written (``Tensor(a!)``)."""
    return [
        (i, a.name)
        for i, a in enumerate(op._schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write
    ]


def _kernel_function(op: OpOverload):
    opdef = OPDEFS.get(op._schema.name)
    return getattr(opdef, "_init_fn", None) if opdef is not None else None


def inlined_implementation(op: OpOverload):
    """The Python implementation this pass inlines for ``op`` (a kernel of a non-core namespace
    that writes into an argument), or ``None`` when the pass leaves its calls alone."""
    if op._schema.name.split("::")[0] in _CORE_NAMESPACES or not written_arguments(op):
        return None
    return _kernel_function(op)


class NkiKernelWriteBackendConfigPass(FXPass):
    """Configures (and, for this lowering, inlines) kernels that write into a caller's buffer."""

    version = 1

    def transform(self, gm: GraphModule, ctx: PassContext) -> GraphModule:
        graph_name = ctx.graph_name
        configs: list[dict] = []
        changed = False
        for node in list(gm.graph.nodes):
            if node.op != "call_function" or not isinstance(node.target, OpOverload):
                continue
            namespace = node.target._schema.name.split("::")[0]
            written = written_arguments(node.target)
            if namespace in _CORE_NAMESPACES or not written:
                continue
            config = self._config(node, written, graph_name)
            node.meta[CONFIG_KEY] = config
            inlined, reason = self._inline(gm, node, config)
            configs.append({**config, "node": node.name, "inlined": inlined, **({"reason": reason} if reason else {})})
            changed = True
        if configs:
            gm.meta[RECORD_KEY] = gm.meta.get(RECORD_KEY, []) + configs
        return _graph.finish(gm) if changed else gm

    def _config(self, node: Node, written: list[tuple[int, str]], graph_name: str) -> dict:
        bound = node.target._schema.arguments
        entries = []
        for position, arg_name in written:
            if position < len(node.args):
                value = node.args[position]
            elif arg_name in node.kwargs:
                value = node.kwargs[arg_name]
            else:
                value = bound[position].default_value if bound[position].has_default_value() else None
            if not isinstance(value, Node):
                raise FXPassError(
                    self.name,
                    graph_name,
                    f"kernel {node.target._schema.name} writes into its argument {arg_name!r}, which is "
                    f"{value!r}, not a tensor of the graph; pass the output buffer as a tensor",
                    node=node.name,
                )
            entries.append({"arg": arg_name, "position": position, "buffer": value.name})
        return {"kernel": node.target._schema.name, "write_back": entries}

    def _inline(self, gm: GraphModule, node: Node, config: dict) -> tuple[bool, str | None]:
        fn = _kernel_function(node.target)
        if fn is None:
            return False, "no Python implementation registered with torch.library.custom_op"
        schema = node.target._schema
        try:
            values = _bind(node, schema)
        except ValueError as exc:
            return False, str(exc)
        tensor_slots = [i for i, v in enumerate(values) if isinstance(v, Node)]
        examples = []
        for i in tensor_slots:
            val = values[i].meta.get("example_value", values[i].meta.get("val"))
            if not isinstance(val, torch.Tensor):
                return False, f"argument {schema.arguments[i].name!r} has no recorded shape to trace the kernel with"
            examples.append(torch.empty_strided(tuple(val.shape), tuple(val.stride()), dtype=val.dtype))

        def body(*tensors):
            full = list(values)
            for slot, t in zip(tensor_slots, tensors):
                full[slot] = t
            return fn(*full)

        from torch.fx.experimental.proxy_tensor import make_fx

        try:
            traced = make_fx(body, tracing_mode="fake")(*examples)
        except Exception as exc:  # any tracing failure: keep the call, lowering will name it
            log.debug("kernel %s not inlined: %s", config["kernel"], exc)
            return False, f"its implementation could not be traced ({type(exc).__name__}: {exc})"

        traced_out = next(iter(traced.graph.find_nodes(op="output"))).args[0]
        if node.users and not _maps_onto_uses(node, traced_out):
            return False, "its traced result does not match how the graph uses the call's result"

        env: dict[Node, Node] = {}
        placeholders = iter(values[i] for i in tensor_slots)
        result = None
        with gm.graph.inserting_before(node):
            for sub in traced.graph.nodes:
                if sub.op == "placeholder":
                    env[sub] = next(placeholders)
                elif sub.op == "output":
                    result = torch.fx.node.map_arg(sub.args[0], lambda n: env[n])
                elif sub.op == "get_attr":
                    attr = f"_kernel_const_{node.name}_{sub.target}"
                    setattr(gm, attr, getattr(traced, str(sub.target)))
                    env[sub] = gm.graph.get_attr(attr)
                else:
                    new = gm.graph.node_copy(sub, lambda n: env[n])
                    new.meta[CONFIG_KEY] = config
                    env[sub] = new
        _replace_result(node, result)
        gm.graph.erase_node(node)
        return True, None


def _bind(node: Node, schema) -> list:
    values = []
    for i, formal in enumerate(schema.arguments):
        if i < len(node.args):
            values.append(node.args[i])
        elif formal.name in node.kwargs:
            values.append(node.kwargs[formal.name])
        elif formal.has_default_value():
            values.append(formal.default_value)
        else:
            raise ValueError(f"argument {formal.name!r} is missing")
    return values


def _maps_onto_uses(node: Node, traced_out) -> bool:
    import operator

    if isinstance(traced_out, Node):
        return True
    if isinstance(traced_out, (list, tuple)):
        return all(
            u.op == "call_function" and u.target is operator.getitem and isinstance(u.args[1], int)
            and u.args[1] < len(traced_out) and isinstance(traced_out[u.args[1]], Node)
            for u in node.users
        )
    return False


def _replace_result(node: Node, result) -> None:
    if not node.users:
        return
    if isinstance(result, Node):
        node.replace_all_uses_with(result)
        return
    if isinstance(result, (list, tuple)):
        import operator

        for user in list(node.users):
            if user.op == "call_function" and user.target is operator.getitem and isinstance(user.args[1], int):
                user.replace_all_uses_with(result[user.args[1]])
                user.graph.erase_node(user)
        if not node.users:
            return
    raise ValueError(f"cannot map the uses of kernel call {node.name!r} onto its traced result")
