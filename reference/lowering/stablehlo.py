"""Lowering: an ATen FX graph (from AOT Autograd) to StableHLO text with torch-mlir.

The text is the thing that is hashed, cached and snapshotted, so it must be a pure function of
the graph and its input specs: it is printed without debug locations (no file paths, no source
lines), and the module's function is always named ``main``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import logging
import operator
import os
import re
import struct
from typing import Any, Callable, Sequence

import torch

from reference.core.errors import LoweringError, UnsupportedInputError
from reference.core.specs import LoweredGraph, TensorSpec, with_none_outputs  # noqa: F401 - with_none_outputs kept importable here
from reference.core.torch_compat import OpOverload, core_aten_decompositions
from reference.lowering.decompositions import extra_decompositions, falling_back


#: The namespaces whose entries of torch's core decomposition table (and of torch-mlir's, built
#: from it) the lowering takes. That table also lists the composite-implicit ops of every op namespace the process has touched so far
#: (``quantized_decomposed`` once Inductor is imported, a test's own namespace, ...): those
#: decompose on their own during the trace, and keeping them would make the table, and the op
#: table's fingerprint, depend on what else the process imported.
CORE_NAMESPACES = ("aten", "c10d_functional", "_c10d_functional")


@functools.lru_cache(maxsize=1)
def decomposition_table() -> dict:
    """The core ATen decompositions, torch-mlir's own table (SDPA, layer norm, ...), and the
    backend's (:mod:`reference.lowering.decompositions`: sort/topk with a defined tie order, ...).
    The same in every process: see :data:`CORE_NAMESPACES`."""
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    if torch.distributed.is_available():
        # Registers the legacy c10d_functional -> _c10d_functional decompositions into the core
        # table; anything that imports Inductor imports it too, so it is imported here always.
        importlib.import_module("torch.distributed._functional_collectives")

    table = dict(core_aten_decompositions())
    table.update(get_decomposition_table())  # torch-mlir's also lists the touched namespaces' ops
    table = {op: fn for op, fn in table.items() if getattr(op, "namespace", None) in CORE_NAMESPACES}
    for op, fn in extra_decompositions().items():
        table[op] = falling_back(fn, table.get(op))  # most replace the entry; a few decline to it
    return table


_SUPPORTED_DTYPES = {
    torch.float32, torch.float16, torch.bfloat16, torch.float64,
    torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool,
}


def input_specs(gm: torch.fx.GraphModule, graph_name: str) -> tuple[TensorSpec, ...]:
    specs = []
    for node in gm.graph.find_nodes(op="placeholder"):
        val = node.meta.get("val")
        if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)) or (
            isinstance(val, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in val.shape)
        ):
            raise UnsupportedInputError(
                f"input {node.name!r} has a symbolic shape; the backend compiles static shapes only "
                "(pass dynamic=False, or let each new shape recompile)",
                graph_name=graph_name,
            )
        if not isinstance(val, torch.Tensor):
            raise UnsupportedInputError(
                f"input {node.name!r} is a {type(val).__name__}, not a tensor; pass tensors "
                "(Python scalars are specialized by Dynamo unless marked dynamic)",
                graph_name=graph_name,
            )
        if val.dtype not in _SUPPORTED_DTYPES:
            raise UnsupportedInputError(
                f"input {node.name!r} has dtype {val.dtype}, which the compiler does not take; "
                f"supported: {sorted(str(d).replace('torch.', '') for d in _SUPPORTED_DTYPES)}",
                graph_name=graph_name,
            )
        specs.append(TensorSpec.of(val))
    return tuple(specs)


def output_specs(gm: torch.fx.GraphModule) -> tuple[TensorSpec, ...]:
    out_node = next(iter(gm.graph.find_nodes(op="output")))
    specs = []
    for arg in _flatten(out_node.args[0]):
        val = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
        if isinstance(val, torch.Tensor):
            specs.append(TensorSpec.of(val))
    return tuple(specs)


def none_outputs(gm: torch.fx.GraphModule) -> tuple[int, ...]:
    """Positions of the graph's (flattened) outputs that are ``None``. The lowered module returns
    only the tensors; the caller puts the ``None`` back (:func:`with_none_outputs`). A backward
    graph has one for each input that takes no gradient (a batch, a frozen weight)."""
    out_node = next(iter(gm.graph.find_nodes(op="output")))
    return tuple(i for i, arg in enumerate(_flatten(out_node.args[0])) if arg is None)


def _check_outputs(gm: torch.fx.GraphModule, graph_name: str) -> None:
    out_node = next(iter(gm.graph.find_nodes(op="output")))
    for i, arg in enumerate(_flatten(out_node.args[0])):
        if arg is not None and not isinstance(arg, torch.fx.Node):
            raise UnsupportedInputError(
                f"output {i} is a constant {type(arg).__name__} ({arg!r}), not a tensor; the compiler "
                "returns tensors only (return it from outside the compiled region)",
                graph_name=graph_name,
            )


def _only_tensor_outputs(gm: torch.fx.GraphModule) -> Callable[[], None]:
    """Make the output node return only the graph's tensors while torch-mlir imports it (a
    ``None`` result becomes ``!torch.none``, which has no StableHLO form); returns the undo."""
    out_node = next(iter(gm.graph.find_nodes(op="output")))
    flat = _flatten(out_node.args[0])
    if not any(arg is None for arg in flat):
        return lambda: None
    saved = out_node.args
    out_node.args = ([arg for arg in flat if arg is not None],)

    def restore() -> None:
        out_node.args = saved

    return restore


def _flatten(x: Any) -> list:
    if isinstance(x, (list, tuple)):
        out = []
        for item in x:
            out.extend(_flatten(item))
        return out
    return [x]


_FAILED_OP = re.compile(r"failed to legalize operation '([\w.]+)'")
_OPERATOR_NAME = re.compile(r'name = "(torch\.[\w.]+)"')


def lower_to_stablehlo(gm: torch.fx.GraphModule, *, graph_name: str) -> LoweredGraph:
    """Lower an ATen-level graph to deterministic StableHLO text.

    Raises :class:`UnsupportedInputError` for non-tensor or symbolic inputs and
    :class:`LoweringError` naming the ops torch-mlir could not lower.
    """
    from torch_mlir import fx as tm_fx
    from torch_mlir import ir
    from torch_mlir.dialects import torch as torch_d
    from torch_mlir.extras.fx_importer import FxImporter

    ins = input_specs(gm, graph_name)
    _check_outputs(gm, graph_name)
    context = ir.Context()
    torch_d.register_dialect(context)
    diagnostics: list[str] = []

    def _collect(diag) -> bool:
        diagnostics.append(str(diag.message))
        diagnostics.extend(str(note.message) for note in diag.notes)
        locations.append(str(diag.location))
        return True  # handled: keep MLIR from printing to stderr

    locations: list[str] = []
    handler = context.attach_diagnostic_handler(_collect)
    wrap_negative_indices(gm)
    zero_size_as_constants(gm)
    nodes = _tag_nodes(gm)
    restore_outputs = _only_tensor_outputs(gm)
    restore_literals = _literals_as_eager_uses_them(gm)
    try:
        with _root_logger_left_alone():
            module = tm_fx.stateless_fx_import(
                gm, output_type="stablehlo", fx_importer=FxImporter(context=context), model_name="main"
            )
    except Exception as exc:  # torch-mlir raises plain Exceptions; the details are in the diagnostics
        text = "\n".join(diagnostics) or str(exc)
        ops = sorted(set(_FAILED_OP.findall(text)) | set(_OPERATOR_NAME.findall(text)))
        ops = [op for op in ops if op != "torch.operator"]
        # The op that failed may be a constant or a helper op; its location names the ATen op.
        # (``ops`` stays what torch-mlir named: the op table condemns an op only on those.)
        origins = [d for d in (_describe(nodes, loc) for loc in locations) if d]
        what = ", ".join(ops) if ops else "an operation"
        origin = f" (from {origins[0]})" if origins else ""
        error = LoweringError(
            f"torch-mlir could not lower {what}{origin} to StableHLO; run it outside the compiled region "
            f"(a graph break) or decompose it.\n{_first_lines(text, 12)}",
            graph_name=graph_name,
            ops=ops,
        )
        error.constant_users = _constant_users(ops, nodes, locations)
        raise error from exc
    finally:
        handler.detach()
        _untag_nodes(nodes)
        restore_outputs()
        restore_literals()
    hlo = module.operation.get_asm(enable_debug_info=False, large_elements_limit=None)
    debug = module.operation.get_asm(enable_debug_info=True, large_elements_limit=None)
    return LoweredGraph(hlo=hlo, input_specs=ins, output_specs=output_specs(gm), node_count=len(gm.graph.nodes),
                        origins=_line_origins(debug, nodes))


def _constant_users(ops: Sequence[str], nodes: list, locations: Sequence[str]) -> list[str]:
    """The ATen ops (torch-mlir's names, ``torch.aten.diagonal``) whose node a failure on a constant
    (``torch.constant.int`` / ``.bool``) came from, when only constants failed.

    torch-mlir converts an ATen op together with its constant operands: when it has no StableHLO
    pattern for the op (``aten.diagonal``, ``aten.cumprod``, ``aten.kthvalue``, ``aten.scatter_reduce``,
    ...) the op stays, and so do its Python-scalar operands, and the conversion names the first
    illegal operation it meets, the constant. The fault is the op's, not the scalar's; this names
    it (from the failure's location, which carries the node), for the op table's probe."""
    if not ops or not all(op.startswith("torch.constant.") for op in ops):
        return []
    users: list[str] = []
    for location in locations:
        for index in _TAG.findall(location):
            target = getattr(nodes[int(index)], "target", None)
            if isinstance(target, OpOverload) and target.namespace == "aten":
                name = f"torch.aten.{target._opname}" + ("" if target._overloadname == "default" else f".{target._overloadname}")
                if name not in users:
                    users.append(name)
    return users


@contextlib.contextmanager
def _root_logger_left_alone():
    """torch-mlir's importer logs through the root logger (``logging.debug``), and the first such
    call in a program that configured no logging runs ``logging.basicConfig()``: from then on every
    library's records reach a stderr handler the program never asked for, and the reference's
    lines print twice. A ``NullHandler`` on the root while it imports keeps that from happening."""
    root = logging.getLogger()
    if root.handlers:
        yield
        return
    guard = logging.NullHandler()
    root.addHandler(guard)
    try:
        yield
    finally:
        root.removeHandler(guard)


# --- negative indices ------------------------------------------------------------------------------

_aten = torch.ops.aten
# indexing ops whose second argument is a list of index tensors (``None`` for a full dimension)
_INDEXING_OPS = (
    _aten.index.Tensor, _aten._unsafe_index.Tensor,
    _aten.index_put.default, _aten._unsafe_index_put.default, _aten.index_put_.default,
)


_WRAPPED = "neuron_nonnegative_index"


def wrap_negative_indices(gm: torch.fx.GraphModule) -> bool:
    """Make every integer index tensor of an indexing op non-negative, in place.

    Torch counts a negative index from the end of its dimension; torch-mlir lowers ``aten.index``
    to a StableHLO gather, which clamps it to 0, and ``aten.index_put`` to a scatter, which drops
    it: both silently wrong (``cache[:, :, -1] = v`` in a sliding-window KV cache, ``x[:, idx]``
    with ``idx = tensor([-1, 0])``). Each such index ``i`` on a dimension of size ``n`` becomes
    ``where(i < 0, i + n, i)``, the same values in eager. Returns whether anything changed.
    """
    changed = False
    for node in [n for op in _INDEXING_OPS for n in gm.graph.find_nodes(op="call_function", target=op)]:
        if len(node.args) < 2:
            continue
        src, indices = node.args[0], node.args[1]
        shape = src.meta["val"].shape if isinstance(src, torch.fx.Node) and "val" in src.meta else None
        if shape is None or not isinstance(indices, (list, tuple)):
            continue
        wrapped, touched = list(indices), False
        for dim, idx in enumerate(indices):
            val = idx.meta.get("val") if isinstance(idx, torch.fx.Node) else None
            if not isinstance(val, torch.Tensor) or val.dtype == torch.bool or val.is_floating_point():
                continue
            if dim >= len(shape) or not isinstance(shape[dim], int) or idx.meta.get(_WRAPPED):
                continue
            wrapped[dim] = _wrapped_index(gm, node, idx, val, shape[dim])
            touched = True
        if touched:
            node.args = (src, type(indices)(wrapped), *node.args[2:])
            changed = True
    if changed:
        gm.recompile()
    return changed


def _wrapped_index(gm: torch.fx.GraphModule, user: torch.fx.Node, idx: torch.fx.Node, val: torch.Tensor, size: int):
    mode = getattr(val, "fake_mode", None)
    with gm.graph.inserting_before(user), (mode if mode is not None else contextlib.nullcontext()):
        negative = gm.graph.call_function(_aten.lt.Scalar, (idx, 0))
        negative.meta["val"] = _aten.lt.Scalar(val, 0)
        shifted = gm.graph.call_function(_aten.add.Scalar, (idx, size))
        shifted.meta["val"] = _aten.add.Scalar(val, size)
        out = gm.graph.call_function(_aten.where.self, (negative, shifted, idx))
        out.meta["val"] = _aten.where.self(negative.meta["val"], shifted.meta["val"], val)
        out.meta[_WRAPPED] = True  # lowering the same graph again leaves it as it is
    for new in (negative, shifted, out):  # errors in them name the indexing op's source line
        if "stack_trace" in user.meta:
            new.meta["stack_trace"] = user.meta["stack_trace"]
    return out


# --- zero-size values ------------------------------------------------------------------------------


#: Dtypes torch-mlir cannot legalize a literal of (``torch.vtensor.literal`` of ``ui8`` fails):
#: their zero-size values keep their node (``empty([0], dtype=uint8)``, batch norm's reserve
#: output, lowers as it is).
_NO_LITERAL_DTYPES = (torch.uint8,)


def _from_impure(node: torch.fx.Node) -> bool:
    """Whether ``node`` takes an item of a node with side effects: the effect token that
    ``with_effects`` returns is an empty tensor, and it must stay the op's (the caller passes the
    token in and reads it back)."""
    if node.target is not operator.getitem or not isinstance(node.args[0], torch.fx.Node):
        return False
    source = node.args[0]
    return source.is_impure() or source.target is torch.ops.higher_order.with_effects


def zero_size_as_constants(gm: torch.fx.GraphModule) -> bool:
    """Replace every computed value with no elements by a constant of its dtype and shape, in place.

    A tensor with a dimension of size 0 has no values, so whatever computed it can be dropped:
    only its dtype and shape are seen. torch-mlir lowers such computations wrongly or not at all
    (``x[:, :0]`` became a ``stablehlo.slice`` whose inferred type kept the whole dimension;
    ``empty_strided([2, 0])`` from ``new_zeros``, ``aten.index`` of an empty tensor and
    ``nonzero_static(size=0)`` failed to legalize), and each such failure broke the graph. The
    constant is an attribute of the graph module (a zero-size buffer), which the importer writes as
    a StableHLO literal; the computation that produced the value is removed when nothing else uses
    it. Graph inputs, values whose node has side effects (and the items of such a node: an effect
    token is an empty tensor) and uint8 values (no literal of them lowers) keep their node. Returns whether anything changed."""
    changed = False
    for node in list(gm.graph.nodes):
        val = node.meta.get("val")
        if (node.op != "call_function" or not isinstance(val, torch.Tensor) or node.is_impure()
                or any(not isinstance(s, int) for s in val.shape) or val.numel() != 0
                or node.target is _aten.lift_fresh_copy.default or val.dtype in _NO_LITERAL_DTYPES
                or _from_impure(node)):
            continue
        if not any(isinstance(s, int) and s == 0 for s in val.shape):
            continue
        name = f"_neuron_zero_size_{len([n for n in gm.graph.nodes if n.op == 'get_attr'])}_{node.name}"
        gm.register_buffer(name, torch.empty(tuple(val.shape), dtype=val.dtype), persistent=False)
        with gm.graph.inserting_before(node):
            constant = gm.graph.get_attr(name)
        constant.meta.update({k: v for k, v in node.meta.items() if k in ("val", "stack_trace", "tensor_meta")})
        node.replace_all_uses_with(constant)
        changed = True
    if changed:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return changed


# --- float literals ---------------------------------------------------------------------------------
# A Python float in a node's arguments (``x * 0.1``, an epsilon, an attention scale) becomes a
# float64 constant in the StableHLO text. IREE demotes float64 to float32 (the reference's declared
# precision), and its demotion rounds a constant toward zero: 0.1 becomes 0.099999994, 4/3 becomes
# 1.3333332, one unit in the last place below the float32 that eager's kernels use (they convert
# the scalar to the op's compute type, rounding to nearest). So ``x * 0.1`` was off by one ulp, and
# an index computed as ``floor((i + 0.5) * 4/3)`` (nearest-exact interpolation) landed one below.
# Each such literal is lowered as the float32 nearest to it, a value float64 holds exactly, so the
# demotion has nothing left to round. Literals past float32's range are left to IREE as they are.
# A scalar bound of ``clamp`` on a float16/bfloat16 tensor is lowered as the nearest value of that
# type: iree-compile rejects the graph when the bound's conversion to the half type is inexact
# ("failed to legalize operation 'util.initializer'": ``x.clamp(min=0.1)``, ``F.normalize``'s
# epsilon), and a bound rounded to the tensor's type clamps to what eager's result rounds to.

_FLOAT32_MAX = 3.4028234663852886e38


def _nearest_float32(value: float) -> float:
    if not (-_FLOAT32_MAX <= value <= _FLOAT32_MAX):  # inf, nan, or out of float32's range
        return value
    return struct.unpack("f", struct.pack("f", value))[0]


def _rounded(arg: Any, nearest: Callable[[float], float] = _nearest_float32) -> Any:
    if type(arg) is float:
        return nearest(arg)
    if isinstance(arg, (list, tuple)):
        items = [_rounded(a, nearest) for a in arg]
        return arg if all(a is b for a, b in zip(items, arg)) else type(arg)(items)
    return arg


_CLAMPS = (_aten.clamp.default, _aten.clamp_min.default, _aten.clamp_max.default)


def _nearest_for(node: torch.fx.Node) -> Callable[[float], float]:
    """How ``node``'s float literals are rounded: to its half type for a clamp of a half tensor."""
    if node.target in _CLAMPS and node.args and isinstance(node.args[0], torch.fx.Node):
        val = node.args[0].meta.get("val")
        if isinstance(val, torch.Tensor) and val.dtype in (torch.float16, torch.bfloat16):
            info = torch.finfo(val.dtype)
            return lambda v: torch.tensor(v, dtype=val.dtype).item() if info.min <= v <= info.max else v
    return _nearest_float32


def _literals_as_eager_uses_them(gm: torch.fx.GraphModule) -> Callable[[], None]:
    """Round every float literal of the graph's calls to its nearest float32 (a clamp's bound on a
    half tensor: to the nearest value of its type), for the lowering only. The returned function
    puts the graph's own literals back: an eager fallback of the same graph, which may compute in
    float64, keeps them."""
    saved = []
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        nearest = _nearest_for(node)
        args, kwargs = _rounded(node.args, nearest), {k: _rounded(v, nearest) for k, v in node.kwargs.items()}
        if args is not node.args or any(kwargs[k] is not v for k, v in node.kwargs.items()):
            saved.append((node, node.args, node.kwargs))
            node.args, node.kwargs = args, kwargs

    def restore() -> None:
        for node, args, kwargs in saved:
            node.args, node.kwargs = args, kwargs

    return restore


# --- where each op of the StableHLO text came from -------------------------------------------------
# torch-mlir turns a node's stack trace into the MLIR location of what it emits for the node. While
# lowering, each call node's trace is replaced by a tag naming the node (its index as a file name),
# so the debug-info text maps every line back to an FX node. Locations never enter the hashed text.

_TAG = re.compile(r'"neuron-node-(\d+)"')
_LOC_REF = re.compile(r"loc\((#loc\d*)\)\s*$")
_LOC_DEF = re.compile(r"^(#loc\d*) = (loc\(.*\))\s*$")
_USER_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\w+)')


def _tag_nodes(gm: torch.fx.GraphModule) -> list:
    nodes = list(gm.graph.nodes)
    for i, node in enumerate(nodes):
        node.meta["_neuron_saved_trace"] = node.meta.get("stack_trace")
        node.meta["stack_trace"] = f'  File "neuron-node-{i}", line 1, in {node.name}\n'
    return nodes


def _untag_nodes(nodes: list) -> None:
    for node in nodes:
        saved = node.meta.pop("_neuron_saved_trace", None)
        if saved is None:
            node.meta.pop("stack_trace", None)
        else:
            node.meta["stack_trace"] = saved


def _describe(nodes: list, location: str) -> str | None:
    """``aten.topk.default (node topk, model.py:107 in forward)`` for a location naming a node."""
    found = _TAG.findall(location)
    if not found:
        return None
    node = nodes[int(found[0])]
    where = ""
    trace = node.meta.get("_neuron_saved_trace") or node.meta.get("stack_trace") or ""
    frames = _USER_FRAME.findall(trace) if "neuron-node-" not in trace else []
    if frames:
        file, line, fn = frames[-1]
        where = f", {file.rsplit('/', 1)[-1]}:{line} in {fn}"
    return f"{node.target} (node {node.name}{where})"


def _line_origins(debug_text: str, nodes: list) -> tuple[tuple[int, str], ...]:
    """Line number (1-based, in the text without debug info) -> the node it came from."""
    lines = debug_text.splitlines()
    # The debug text may open with location aliases; the module starts where the plain text does.
    skip = next((i for i, line in enumerate(lines) if line.startswith("module")), 0)
    aliases = {m.group(1): m.group(2) for m in map(_LOC_DEF.match, lines) if m}

    def resolve(text: str, depth: int = 0) -> str:
        if depth > 8:
            return text
        return re.sub(r"#loc\d*", lambda m: resolve(aliases.get(m.group(0), ""), depth + 1), text)

    body = lines[skip:]
    found: list[str | None] = [None] * len(body)
    for i, line in enumerate(body):
        ref = _LOC_REF.search(line)
        if ref is not None:
            found[i] = _describe(nodes, resolve(ref.group(1)))
    # An op with a region prints its location on its closing line; its first line (where the
    # compiler points) takes the origin of the next located line.
    for i in range(len(body) - 2, -1, -1):
        if found[i] is None and not body[i].strip().startswith(("}", "func.func", "module")):
            found[i] = found[i + 1]
    return tuple((i + 1, what) for i, what in enumerate(found) if what)


def _first_lines(text: str, n: int) -> str:
    lines = text.strip().splitlines()
    return "\n".join(lines[:n]) + ("\n..." if len(lines) > n else "")


def count_ops(hlo: str) -> dict[str, int]:
    """Histogram of StableHLO op names in a module's text (for reports and tests)."""
    counts: dict[str, int] = {}
    for name in re.findall(r"\b(stablehlo\.[a-z_]+)", hlo):
        counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items()))


def specs_of(tensors: Sequence[torch.Tensor]) -> tuple[TensorSpec, ...]:
    return tuple(TensorSpec.of(t) for t in tensors)


@functools.lru_cache(maxsize=1)
def lowering_fingerprint() -> str:
    """A digest of the lowering package's code (this module, the decompositions, the sort and op
    rewrites, ...): an edited lowering must never serve text cached by the old one, nor a lowering
    decision learned by it (:mod:`reference.lowering.lowering_probe` keys its records with it)."""
    folder = os.path.dirname(os.path.abspath(__file__))
    digest = hashlib.sha256()
    for name in sorted(n for n in os.listdir(folder) if n.endswith(".py")):
        with open(os.path.join(folder, name), "rb") as fh:
            digest.update(name.encode() + b"\0" + fh.read())
    return digest.hexdigest()[:16]
