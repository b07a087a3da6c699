"""Decompositions of ``sort``, ``argsort`` and ``topk`` that the compiler accepts, with a defined
order for ties.

torch-mlir lowers ``aten.sort`` to ``stablehlo.sort`` of the values with an ``i64`` iota, with a
comparator on the values only and ``is_stable = false``; ``aten.sort.stable`` does not lower at all.
``aten.topk`` lowers to the same sort followed by slices, which IREE's input conversion rewrites
into ``chlo.top_k`` and then rejects (``chlo.top_k`` yields ``i32`` indices, the graph wants
``i64``). And tied elements come out in whatever order the sort leaves them.

These decompositions sort *unique* keys instead, so the order is the same for any sort algorithm,
stable or not:

- each element gets an integer key with the same order as torch's comparison: floats by their bits
  (negative ones flipped), ``-0.0`` equal to ``0.0``, every NaN equal and above ``+inf`` (torch
  sorts NaN as the largest value); small integer types as themselves;
- the key and the element's index along the sorted dimension are packed into one ``int64``
  (key in the high 32 bits; for a descending sort the index is stored as ``2**32 - 1 - index``),
  so no two keys are equal and ties are ordered by index, lower index first, in both directions.
  This is the order of ``torch.sort(..., stable=True)``;
- the sorted keys give the permutation (their low 32 bits), and the values are gathered from the
  input with it (bit-exact, NaN payloads and signed zeros kept).

The permutation is read from the sorted keys, never from the sort's own index result, so nothing
slices that result and IREE's top-k rewrite does not fire.

``int64`` keys cannot be packed; for those the sort runs twice: an unstable sort of the values,
then a sort of ``(rank of the value, position)`` packed the same way, which orders each run of
equal values by position.
"""

from __future__ import annotations

import threading

import torch

aten = torch.ops.aten

_LOW = 2**32 - 1
_NAN_KEY = 2**31 - 1
_SMALL_INTS = (torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)
# float64 is keyed through float32: the compiler demotes float64 to float32 throughout a graph (its
# default input conversion), so two float64 values that round to one float32 are equal to it.
_SMALL_FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


_TRACING = threading.local()  # set while a decomposition emits its own raw sort


def _raw_sort(x: torch.Tensor, dim: int, descending: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``aten.sort.default`` kept as is in the traced graph (not decomposed again)."""
    _TRACING.raw = True
    try:
        return aten.sort.default(x, dim, descending)
    finally:
        _TRACING.raw = False


def _key32(x: torch.Tensor) -> torch.Tensor | None:
    """An int64 tensor in [-2**31, 2**31) ordered like ``x`` under torch's sort, or ``None``."""
    if x.dtype in _SMALL_FLOATS:
        f = x.to(torch.float32)
        f = torch.where(f == 0, torch.zeros_like(f), f)  # -0.0 sorts as a tie with 0.0
        bits = f.view(torch.int32).to(torch.int64)
        # Negative floats: larger magnitude must sort lower. -1 - bits - 2**31 reverses their
        # magnitude bits and keeps them below every non-negative float (no int32 overflow in int64).
        key = torch.where(bits < 0, -1 - bits - 2**31, bits)
        return torch.where(torch.isnan(f), torch.full_like(key, _NAN_KEY), key)
    if x.dtype in _SMALL_INTS:
        return x.to(torch.int64)
    return None


def _positions(x: torch.Tensor, dim: int) -> torch.Tensor:
    shape = [1] * x.dim()
    shape[dim] = x.shape[dim]
    return torch.arange(x.shape[dim], dtype=torch.int64, device=x.device).view(shape).expand(x.shape)


def _sort_packed(high: torch.Tensor, pos: torch.Tensor, dim: int, descending: bool) -> torch.Tensor:
    """Positions in the order of ``(high, pos)``: ``high`` by ``descending``, ``pos`` ascending."""
    low = (_LOW - pos) if descending else pos
    packed = high * (2**32) + low
    ordered, _ = _raw_sort(packed, dim, descending)
    low = ordered & _LOW
    return (_LOW - low) if descending else low


def stable_order(x: torch.Tensor, dim: int, descending: bool) -> torch.Tensor:
    """The permutation (int64) that sorts ``x`` along ``dim``; ties by index, lower first."""
    pos = _positions(x, dim)
    key = _key32(x)
    if key is not None:
        return _sort_packed(key, pos, dim, descending)
    # int64: an unstable sort groups equal keys; each run is then ordered by position.
    ordered, perm = _raw_sort(x, dim, descending)
    prev = torch.cat([ordered.narrow(dim, 0, 1), ordered.narrow(dim, 0, x.shape[dim] - 1)], dim)
    starts = (ordered != prev).to(torch.int64)
    rank = torch.cumsum(starts, dim)  # the run's rank: same for equal keys, rising along the order
    return _sort_packed(rank, perm, dim, False)


def _dim(x: torch.Tensor, dim: int) -> int:
    return dim % x.dim() if x.dim() else 0


def sort(x: torch.Tensor, dim: int = -1, descending: bool = False):
    if getattr(_TRACING, "raw", False):
        return NotImplemented  # our own sort of unique keys: trace the op itself
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    dim = _dim(x, dim)
    order = stable_order(x, dim, descending)
    return torch.gather(x, dim, order), order


def sort_stable(x: torch.Tensor, *, stable: bool | None = None, dim: int = -1, descending: bool = False):
    return sort(x, dim, descending)


def topk(x: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
    # sorted=False allows any order; the sorted one is as good as any and matches eager more often.
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    dim = _dim(x, dim)
    order = stable_order(x, dim, largest).narrow(dim, 0, k)
    return torch.gather(x, dim, order), order


def decompositions() -> dict:
    """ATen overload -> decomposition, for the lowering's decomposition table."""
    return {
        aten.sort.default: sort,
        aten.sort.stable: sort_stable,
        aten.topk.default: topk,
    }
