"""The backend's own decompositions: ops whose default lowering the installed tools reject.

They join the core ATen table and torch-mlir's in :func:`reference.lowering.stablehlo.decomposition_table`.
Each entry returns ``NotImplemented`` for the cases it leaves to the default path.
"""

from __future__ import annotations

import torch

from reference.lowering import sorting

aten = torch.ops.aten


def fmod_scalar(x: torch.Tensor, other) -> torch.Tensor:
    """``fmod(x, scalar)``: torch-mlir fails on the scalar operand (``torch.constant.int`` does not
    legalize), so the scalar becomes a tensor; integers use ``x - other * trunc(x / other)``, exact."""
    if x.is_floating_point():
        return aten.fmod.Tensor(x, torch.scalar_tensor(other, dtype=x.dtype, device=x.device))
    return x - other * torch.div(x, other, rounding_mode="trunc")


def extra_decompositions() -> dict:
    table = {aten.fmod.Scalar: fmod_scalar}
    table.update(sorting.decompositions())
    return table
