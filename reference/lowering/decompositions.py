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


def grouped_mm_rows(input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """A grouped matmul over rows sorted by group (``transformers::grouped_mm_fallback``: row ``s``
    of ``input`` [S, K] times ``weight[e]`` [K, N] for the group ``e`` with
    ``offs[e-1] <= s < offs[e]``; rows from ``offs[-1]`` on are zero) as one batched matmul: each
    row's group comes from comparing its index with the offsets, its weight matrix is gathered, and
    ``bmm`` multiplies every row by its own. Static shapes; no loop over a data-dependent count."""
    rows = torch.arange(input.shape[0], device=input.device)
    group = (rows[:, None] >= offs.to(rows.dtype)[None, :]).sum(-1)  # [S], weight.shape[0] past the end
    inside = group < weight.shape[0]
    per_row = weight[group.clamp(max=weight.shape[0] - 1)]  # [S, K, N]
    out = torch.bmm(input.unsqueeze(1), per_row).squeeze(1)
    return torch.where(inside[:, None], out, torch.zeros((), dtype=out.dtype, device=out.device))


#: Ops of other libraries' namespaces the backend lowers itself: (namespace, op, overload) -> its
#: decomposition. Looked up when a compile or a graph-break decision needs them, since the library
#: registers its op when it is imported, which may be after the backend.
LIBRARY_LOWERINGS = {("transformers", "grouped_mm_fallback", "default"): grouped_mm_rows}


def library_lowerings() -> dict:
    """The entries of :data:`LIBRARY_LOWERINGS` whose op is registered in this process."""
    table = {}
    for (namespace, name, overload), fn in LIBRARY_LOWERINGS.items():
        if torch._C._dispatch_has_kernel(f"{namespace}::{name}"):  # registered in this process
            table[getattr(getattr(getattr(torch.ops, namespace), name), overload)] = fn
    return table


def extra_decompositions() -> dict:
    table = {aten.fmod.Scalar: fmod_scalar}
    table.update(sorting.decompositions())
    return table
