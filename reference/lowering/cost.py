"""How much arithmetic one call of a lowered module does, read from its StableHLO text.

The runtime uses the figure to pick how a call runs (:func:`reference.runtime.choose_driver`): a
small program (a decode step of a small decoder: tens of microseconds of arithmetic) is faster on
the caller's own thread than handed to IREE's worker threads and waited for, and a large one is
faster spread over the cores. The estimate only has to put a module on the right side of that line,
so it counts what dominates:

- ``dot_general`` / ``dot``: two operations per multiply-accumulate, ``2 * |result| * |contracted|``;
- ``convolution``: ``2 * |result| * |kernel| / out_features`` (each output reads one filter);
- every other op: one operation per element of its result.

Shapes are static in the modules the reference compiles; a dynamic dimension (``?``) counts as 1.
"""

from __future__ import annotations

import math
import re

_OP = re.compile(r'=\s*"?(?:stablehlo|chlo)\.(\w+)')
_TENSOR = re.compile(r"tensor<([^>]*)>")
_CONTRACTING = re.compile(r"contracting_dims\s*=\s*\[([^\]]*)\]")
_KERNEL_LAYOUT = re.compile(r"dim_numbers\s*=\s*\[[^\]]*\]\s*x\s*\[([^\]]*)\]")


def _dims(spec: str) -> list[int]:
    """The dimensions of one ``tensor<...>`` type body (``2x64xf32`` -> ``[2, 64]``)."""
    parts = spec.split(",")[0].split("x")[:-1]  # the last part is the element type; drop an encoding
    return [int(p) if p.isdigit() else 1 for p in parts]


def _numel(dims: list[int]) -> int:
    return math.prod(dims) if dims else 1


def _line_flops(op: str, line: str) -> int:
    tensors = [_dims(t) for t in _TENSOR.findall(line)]
    if not tensors:
        return 0
    result = tensors[-1]
    if op in ("dot_general", "dot") and len(tensors) >= 3:
        lhs = tensors[-3]
        found = _CONTRACTING.search(line)
        contracted = [int(i) for i in found.group(1).split(",") if i.strip()] if found else [len(lhs) - 1]
        return 2 * _numel(result) * _numel([lhs[i] for i in contracted if i < len(lhs)])
    if op == "convolution" and len(tensors) >= 3:
        kernel = tensors[-2]
        layout = _KERNEL_LAYOUT.search(line)
        names = [n.strip() for n in layout.group(1).split(",")] if layout else []
        out_features = kernel[names.index("o")] if "o" in names and names.index("o") < len(kernel) else kernel[0]
        return 2 * _numel(result) * _numel(kernel) // max(1, out_features)
    return _numel(result)


def estimate_flops(hlo: str) -> int:
    """Arithmetic operations in one call of the module ``hlo`` (see the module docstring)."""
    total = 0
    for line in hlo.splitlines():
        found = _OP.search(line)
        if found is not None:
            total += _line_flops(found.group(1), line)
    return total
