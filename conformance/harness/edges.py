"""Values at the edges of a dtype's range, and how results on them are held to eager.

The suite's other comparisons use values of ``randn`` size, where every dtype is exact enough and
nothing overflows: a backend that computes bfloat16 through float16, or flushes float32's subnormals,
or divides int64 in floating point, passes them. An :class:`Edge` is one region of a dtype's range
that real models reach (attention scores and logits past float16's max, variances and gradients
below its normal range, ``inf``/``nan`` from a masked row, index arithmetic near int64's bounds),
with the inputs to draw there and the tolerance that still means something there (an absolute
tolerance of ``1e-5`` says nothing about values of ``1e-30``).

Two users: the numerics contract (``conformance/tests/test_numerics.py``: graphs that matter in
models, per dtype and edge) and the op lane's edge variant (``CONFORMANCE_OPS_EDGES=1``:
:func:`at_edges` re-draws each OpInfo sample's tensors at the edges of the row's dtype).

The edges of a float dtype follow the precision the implementation declares: a dtype it computes in
a narrower one (float64 as float32) is held at the narrower dtype's edges, which are the values it
can represent (:func:`edges_for`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from conformance.harness.precision import dtype_name
from conformance.harness.tolerances import POLICY, TOLERANCES, tolerance

#: Inner size of the numerics graphs (reductions, matmul contraction, layer norm): the bands of the
#: reductions are divided by ``2 * K`` so that no sum overflows in any order of accumulation.
K = 16

#: Edge names.
LARGE, TINY, SUBNORMAL, SPECIALS = "large", "tiny", "subnormal", "specials"
BEYOND_FLOAT16, BELOW_FLOAT16_NORMAL = "beyond-float16-range", "below-float16-normal"
BOUNDS, DIVISION = "bounds", "division"

_FLOAT16_MAX = 65504.0
_FLOAT16_SMALLEST_NORMAL = 2.0 ** -14


@dataclasses.dataclass(frozen=True)
class Edge:
    """One region of a dtype's range.

    ``dtype``: the tensors' dtype; ``of``: the dtype whose range the region belongs to (``dtype``
    itself, or the narrower dtype it is declared computed in); ``lo``/``hi``: the band of magnitudes
    (floats; 0 for the special values and the integer edges); ``what``: the region in words, for
    failure messages."""

    name: str
    dtype: str
    of: str
    what: str
    lo: float = 0.0
    hi: float = 0.0

    @property
    def id(self) -> str:
        return f"{self.dtype}-{self.name}" + (f"(as-{self.of})" if self.of != self.dtype else "")

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    def describe(self) -> str:
        """``bfloat16, beyond float16's range (1.3e+05 to 8.5e+37)``."""
        band = f" ({self.lo:.2g} to {self.hi:.2g})" if self.hi else ""
        held = f"; {self.dtype} is declared computed as {self.of}, so held at {self.of}'s edges" if self.of != self.dtype else ""
        return f"{self.dtype}, {self.what}{band}{held}"

    # --- values ---------------------------------------------------------------------------------------

    def band(self, shape: tuple[int, ...], generator: torch.Generator, *, scale: float = 1.0,
             cap: float | None = None) -> torch.Tensor:
        """Values of ``shape`` whose magnitudes are log-uniform in the band (times ``scale``, at most
        ``cap``), with random signs, made in float64 and rounded once to the edge's dtype."""
        lo, hi = self.lo * scale, self.hi * scale
        if cap is not None:
            lo, hi = min(lo, cap / 4), min(hi, cap)
        logs = torch.empty(shape, dtype=torch.float64).uniform_(math.log(lo), math.log(hi), generator=generator)
        signs = torch.where(torch.rand(shape, generator=generator) < 0.5, -1.0, 1.0).to(torch.float64)
        return (logs.exp() * signs).to(self.torch_dtype)

    def tolerance(self, dtype: Any = None) -> tuple[float, float]:
        """(rtol, atol) for results of ``dtype`` (default: the edge's) on this edge: the suite's
        tolerance for the dtype under the declared precision
        (:func:`conformance.harness.tolerances.tolerance`), with the absolute part scaled to the
        band's lower end (never below two of the smallest steps of the dtype computed in), so that
        values of ``1e-30`` are compared and not waved through by an ``atol`` of ``1e-5``. Exact for
        integers and bools."""
        out = self.torch_dtype if dtype is None else dtype
        rtol, atol = tolerance(out)
        if out.is_floating_point and self.lo:
            info = torch.finfo(getattr(torch, POLICY.precision.computed_as(out)))
            atol = max(atol * self.lo, 2 * info.smallest_normal * info.eps)
        return rtol, atol


def _float_edges(dtype: str, of: str) -> list[Edge]:
    info = torch.finfo(getattr(torch, of))
    top, low = info.max, info.smallest_normal
    if of == "bfloat16":
        return [
            Edge(BEYOND_FLOAT16, dtype, of, "beyond float16's range", 2 * _FLOAT16_MAX, top / 4),
            Edge(BELOW_FLOAT16_NORMAL, dtype, of, "below float16's normal range", low * 2 ** 8, _FLOAT16_SMALLEST_NORMAL),
            Edge(SPECIALS, dtype, of, "inf, -inf, nan and -0.0 among ordinary values"),
        ]
    if of == "float16":
        return [
            Edge(LARGE, dtype, of, "near float16's max", top / 4, top),
            Edge(SUBNORMAL, dtype, of, "float16's subnormals", info.smallest_normal * info.eps, low),
            Edge(SPECIALS, dtype, of, "inf, -inf, nan and -0.0 among ordinary values"),
        ]
    return [
        Edge(LARGE, dtype, of, f"near {of}'s max", top / 4, top),
        Edge(TINY, dtype, of, f"the bottom of {of}'s normal range", low * 2 ** 8, low * 2 ** 30),
        Edge(SUBNORMAL, dtype, of, f"{of}'s subnormals", low * info.eps, low),
        Edge(SPECIALS, dtype, of, "inf, -inf, nan and -0.0 among ordinary values"),
    ]


def edges_for(dtype: Any, computed_as: Any) -> list[Edge]:
    """The edges ``dtype`` is held at, when it is computed as ``computed_as`` (a float dtype the
    implementation declares computing in a narrower one is held at the narrower one's edges; its
    own would overflow there by declaration). int64: its bounds, and division near them."""
    name, of = dtype_name(dtype), dtype_name(computed_as)
    if name == "int64":
        return [
            Edge(BOUNDS, name, name, "near int64's bounds, where eager's arithmetic wraps"),
            Edge(DIVISION, name, name, "division near int64's bounds"),
        ]
    return _float_edges(name, of)


def plant_specials(x: torch.Tensor) -> torch.Tensor:
    """``x`` (2-d, at least 5 rows of 4) with inf, -inf, nan, -0.0 and a row holding both infinities."""
    x = x.clone()
    inf = math.inf
    x[0, 1], x[1, 2], x[2, 0], x[4, 0], x[4, 3] = inf, -inf, math.nan, inf, -inf
    x[3, :] = -0.0
    x[3, 1::2] = 0.0
    return x


def int64_near_bounds(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """int64 values of ``shape``: about half within 2**20 of a bound, the rest small, any sign."""
    top = torch.iinfo(torch.int64).max
    offsets = torch.randint(0, 2 ** 20, shape, generator=generator, dtype=torch.int64)
    near = torch.where(torch.rand(shape, generator=generator) < 0.5, top - offsets, -top - 1 + offsets)
    small = torch.randint(-1000, 1000, shape, generator=generator, dtype=torch.int64)
    return torch.where(torch.rand(shape, generator=generator) < 0.5, near, small)


# --- comparing ----------------------------------------------------------------------------------------


def difference(actual: Any, expected: torch.Tensor, rtol: float, atol: float, *, signed_zeros: bool = False) -> str | None:
    """Why ``actual`` is not eager's ``expected`` at an edge, or ``None``: dtype, shape, or values
    past the tolerance (``inf`` only equals ``inf`` of its sign, ``nan`` only ``nan``), and with
    ``signed_zeros`` the sign of every zero. Names the first differing element with both values."""
    if not isinstance(actual, torch.Tensor):
        return f"a {type(actual).__name__} where eager gives a tensor"
    if actual.dtype != expected.dtype:
        return f"dtype {dtype_name(actual.dtype)}, eager gives {dtype_name(expected.dtype)}"
    if actual.shape != expected.shape:
        return f"shape {list(actual.shape)}, eager gives {list(expected.shape)}"
    a, e = actual.detach().cpu(), expected.detach().cpu()
    if e.is_floating_point():
        a64, e64 = a.to(torch.float64), e.to(torch.float64)
        bad = ~torch.isclose(a64, e64, rtol=rtol, atol=atol, equal_nan=True)
        if signed_zeros:
            bad |= (e64 == 0) & (torch.signbit(a64) != torch.signbit(e64))
        how = f"rtol {rtol:g}, atol {atol:.3g}" + (", signed zeros" if signed_zeros else "")
    else:
        bad = a != e
        how = "exact"
    if not bool(bad.any()):
        return None
    first = tuple(int(i) for i in bad.nonzero()[0])
    return (f"{int(bad.sum())} of {e.numel()} elements differ ({how}); first at {list(first)}: "
            f"eager {e[first].item()!r}, compiled {a[first].item()!r}")


# --- the op lane's edge variant ----------------------------------------------------------------------


def _redraw(value: Any, dtype: torch.dtype, generator: torch.Generator, edge_values) -> Any:
    if isinstance(value, torch.Tensor) and value.dtype == dtype and value.layout == torch.strided:
        return edge_values(tuple(value.shape), generator).to(value.device).requires_grad_(value.requires_grad)
    if isinstance(value, (list, tuple)):
        return type(value)(_redraw(v, dtype, generator, edge_values) for v in value)
    return value


def mixed_edge_values(dtype: Any, computed_as: Any):
    """A function ``(shape, generator) -> tensor`` drawing each element from one of the dtype's
    edges (and ordinary values): for a float dtype, its large, tiny and special values together;
    for int64, values near its bounds; ``None`` for a dtype without edges (bool)."""
    name = dtype_name(dtype)
    if name == "int64":
        return int64_near_bounds
    if name not in TOLERANCES:
        return None
    bands = [e for e in edges_for(name, computed_as) if e.hi]

    def draw(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
        t = getattr(torch, name)
        out = torch.randn(shape, generator=generator).to(t)
        if not out.numel():
            return out
        pick = torch.randint(0, len(bands) + 2, shape, generator=generator)
        for i, edge in enumerate(bands):
            out = torch.where(pick == i, edge.band(shape, generator), out)
        specials = torch.tensor([math.inf, -math.inf, math.nan, -0.0], dtype=t)
        which = torch.randint(0, len(specials), shape, generator=generator)
        return torch.where(pick == len(bands), specials[which], out)

    return draw


def at_edges(sample: Any, dtype: Any, computed_as: Any, seed: int) -> Any | None:
    """The OpInfo ``sample`` with its tensors of ``dtype`` re-drawn at the dtype's edges (same
    shapes; for int64 only the input, since its other int64 tensors are often indices), or
    ``None`` when the dtype has no edges. Other arguments are kept."""
    draw = mixed_edge_values(dtype, computed_as)
    if draw is None:
        return None
    t = getattr(torch, dtype_name(dtype))
    g = torch.Generator().manual_seed(seed)
    if t == torch.int64:
        return _with(sample, _redraw(sample.input, t, g, draw), sample.args, sample.kwargs)
    return _with(sample, _redraw(sample.input, t, g, draw), _redraw(tuple(sample.args), t, g, draw),
                 {k: _redraw(v, t, g, draw) for k, v in sample.kwargs.items()})


def _with(sample: Any, input: Any, args: Any, kwargs: dict) -> Any:
    """A copy of an OpInfo ``SampleInput`` with other tensors (its other attributes kept)."""
    import copy

    out = copy.copy(sample)
    out.input, out.args, out.kwargs = input, tuple(args), dict(kwargs)
    return out


def edge_samples(samples: list[Any], dtype: str, seed: int) -> list[Any]:
    """The op lane's edge variant of a row: each sample re-drawn by :func:`at_edges` at the edges
    of ``dtype`` as the implementation declares computing it; empty for a dtype without edges."""
    computed = POLICY.precision.computed_as(dtype)
    out = [at_edges(s, dtype, computed, seed + i) for i, s in enumerate(samples)]
    return [s for s in out if s is not None]
