"""Lowering: an ATen FX graph (from AOT Autograd) to StableHLO text with torch-mlir.

The text is the thing that is hashed, cached and snapshotted, so it must be a pure function of
the graph and its input specs: it is printed without debug locations (no file paths, no source
lines), and the module's function is always named ``main``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from reference.core.errors import LoweringError, UnsupportedInputError
from reference.core.specs import TensorSpec


@dataclass(frozen=True)
class LoweredGraph:
    hlo: str
    input_specs: tuple[TensorSpec, ...]
    output_specs: tuple[TensorSpec, ...]
    node_count: int


@functools.lru_cache(maxsize=1)
def decomposition_table() -> dict:
    """The core ATen decompositions plus torch-mlir's own table (SDPA, layer norm, ...)."""
    from torch._decomp import core_aten_decompositions
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    table = dict(core_aten_decompositions())
    table.update(get_decomposition_table())
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
    context = ir.Context()
    torch_d.register_dialect(context)
    diagnostics: list[str] = []

    def _collect(diag) -> bool:
        diagnostics.append(str(diag.message))
        diagnostics.extend(str(note.message) for note in diag.notes)
        return True  # handled: keep MLIR from printing to stderr

    handler = context.attach_diagnostic_handler(_collect)
    try:
        module = tm_fx.stateless_fx_import(
            gm, output_type="stablehlo", fx_importer=FxImporter(context=context), model_name="main"
        )
    except Exception as exc:  # torch-mlir raises plain Exceptions; the details are in the diagnostics
        text = "\n".join(diagnostics) or str(exc)
        ops = sorted(set(_FAILED_OP.findall(text)) | set(_OPERATOR_NAME.findall(text)))
        ops = [op for op in ops if op != "torch.operator"]
        what = ", ".join(ops) if ops else "an operation"
        raise LoweringError(
            f"torch-mlir could not lower {what} to StableHLO; run it outside the compiled region "
            f"(a graph break) or decompose it.\n{_first_lines(text, 12)}",
            graph_name=graph_name,
            ops=ops,
        ) from exc
    finally:
        handler.detach()
    hlo = module.operation.get_asm(enable_debug_info=False, large_elements_limit=None)
    return LoweredGraph(hlo=hlo, input_specs=ins, output_specs=output_specs(gm), node_count=len(gm.graph.nodes))


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
