"""The ops torch-mlir has no pattern for, written with ops it has (``reference.lowering.op_rewrites``),
and computations of values with no elements (``zero_size_as_constants``).

Two checks: the special functions' series in eager (no compiler: their accuracy against torch's own
kernels over a dense grid, poles and special values included, at the op lane's float32 tolerance),
and each rewrite compiled through the real lowering, IREE compiler and runtime (the op-table
prober's path, several samples a graph) on the inputs that broke it before: NaNs, signed zeros,
0-d and zero-size tensors, integer scalars."""

from __future__ import annotations

import math

import pytest
import torch

from reference.lowering import op_rewrites, optable
from reference.lowering.stablehlo import decomposition_table, lower_to_stablehlo

#: The op lane's float32 tolerance (conformance.harness.tolerances).
RTOL, ATOL = 1e-4, 1e-5

GRID = torch.cat([
    torch.linspace(-20, 40, 60001),
    torch.tensor([0.0, -0.0, -1.0, -2.0, -9.0, 1.0, 2.0, 0.5, -0.5, 1e-6, -1e-6, 1e-30,
                  -8.9999, -7.0001, 30.5, math.inf, -math.inf, math.nan]),
    # far out: where a shifted product or e^x alone would overflow before the function does
    torch.tensor([6.6e4, 1e5, 3.1e7, 1e20, 3.8e35, 2.9e37, 3e38, 88.0, 90.0, 91.5, 1e37, -1e37,
                  -1e-10, -1e-20, -9.4e-34, 1e-33]),
])


UNIT = torch.cat([torch.linspace(-1.1, 1.1, 44001), torch.tensor([-1.0, 1.0, 0.0, 1 - 1e-7, -1 + 1e-7, math.nan])])
PROBABILITY = torch.cat([torch.linspace(0, 1, 20001), torch.logspace(-38, -1, 400),
                         torch.tensor([1e-30, 1e-10, 1 - 1e-7, -0.1, 1.1, math.nan])])

SPECIAL = {
    "lgamma": (op_rewrites.lgamma, torch.lgamma, GRID),
    "digamma": (op_rewrites.digamma, torch.digamma, GRID),
    "erfc": (op_rewrites.erfc, torch.erfc, GRID),
    "erfcx": (op_rewrites.erfcx, torch.special.erfcx, GRID),
    "log_ndtr": (op_rewrites.log_ndtr, torch.special.log_ndtr, GRID),
    "erfinv": (op_rewrites.erfinv, torch.erfinv, UNIT),
    "ndtri": (op_rewrites.ndtri, torch.special.ndtri, PROBABILITY),
    "i0": (op_rewrites.i0, torch.i0, GRID),
    "i0e": (op_rewrites.i0e, torch.special.i0e, GRID),
    "i1": (op_rewrites.i1, torch.special.i1, GRID),
    "i1e": (op_rewrites.i1e, torch.special.i1e, GRID),
    "polygamma_2": (lambda x: op_rewrites.polygamma(2, x), lambda x: torch.polygamma(2, x), GRID[GRID > -11]),
    "polygamma_3": (lambda x: op_rewrites.polygamma(3, x), lambda x: torch.polygamma(3, x), GRID[GRID > -11]),
}


@pytest.mark.parametrize("name", sorted(SPECIAL))
def test_special_functions_agree_with_torch_over_the_grid_poles_and_special_values(name):
    ours, theirs, grid = SPECIAL[name]
    got, want = ours(grid), theirs(grid)
    assert got.dtype == want.dtype == torch.float32
    # poles and special values exactly: +inf, -inf and NaN where torch gives them
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert torch.equal(torch.isposinf(got), torch.isposinf(want))
    assert torch.equal(torch.isneginf(got), torch.isneginf(want))
    finite = torch.isfinite(want)
    close = torch.isclose(got[finite], want[finite], rtol=RTOL, atol=ATOL)
    assert close.all(), f"off at {grid[finite][~close][:5].tolist()}: {got[finite][~close][:5].tolist()} vs {want[finite][~close][:5].tolist()}"


@pytest.mark.parametrize("largest", [True, False], ids=["cummax", "cummin"])
def test_cumulative_extremes_keep_eagers_ties_and_nans(largest):
    ours, theirs = (op_rewrites.cummax, torch.cummax) if largest else (op_rewrites.cummin, torch.cummin)
    g = torch.Generator().manual_seed(0)
    for x, dim in [(torch.tensor([1.0, 1, 0, 1]), 0), (torch.tensor([1.0, math.nan, 2, math.nan, 3]), 0),
                   (torch.tensor([True, False, True]), 0), (torch.randint(0, 3, (4, 5, 6), generator=g), 1),
                   (torch.randn(4, 5, generator=g), -1)]:
        values, indices = ours(x, dim)
        want = theirs(x, dim)
        assert values.dtype == want.values.dtype
        assert torch.equal(values.nan_to_num(99), want.values.nan_to_num(99)), x
        assert torch.equal(indices, want.indices), x


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_scatter_reduce_agrees_with_eager_on_repeated_and_missing_positions(reduce, include_self, dtype):
    if dtype == torch.bool and reduce == "mean":
        pytest.skip("eager has no mean of bools")
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(5, 4, generator=g) * 3).to(dtype)
    src = (torch.randn(6, 3, generator=g) * 3).to(dtype)
    index = torch.tensor([[0, 0, 4], [0, 2, 4], [2, 2, 2], [0, 1, 1], [4, 4, 0], [1, 0, 4]])[:4]  # rows 1, 3 of 5 missing in places
    got = op_rewrites.scatter_reduce(x, 0, index, src, reduce, include_self=include_self)
    want = torch.scatter_reduce(x, 0, index, src, reduce, include_self=include_self)
    assert got.dtype == want.dtype
    assert torch.allclose(got.float(), want.float(), rtol=1e-5, atol=1e-5), (got, want)


def test_integer_and_half_operands_are_promoted_as_eager_promotes_them():
    ints = torch.tensor([-3, 0, 1, 4])
    assert op_rewrites.lgamma(ints).dtype == torch.float32
    assert torch.allclose(op_rewrites.lgamma(ints), torch.lgamma(ints), rtol=RTOL, atol=ATOL)
    half = torch.tensor([0.3, 2.5, -1.5], dtype=torch.bfloat16)
    assert op_rewrites.digamma(half).dtype == torch.bfloat16
    assert torch.equal(op_rewrites.digamma(half), torch.digamma(half.float()).to(torch.bfloat16))


@pytest.fixture(scope="module")
def prober():
    return optable.Prober()


def _sample(name, fn, *args):
    return optable.Sample(name, fn, args, fn(*args))


def _samples() -> list[optable.Sample]:
    nan, inf = math.nan, math.inf
    a = torch.tensor([1.0, nan, -2.0, nan, 0.0, -inf])
    b = torch.tensor([nan, 3.0, -1.0, nan, -0.0, 2.0])
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 5, generator=g)
    ints = torch.randint(-5, 6, (4, 5), generator=g)
    seq = torch.randn(3, 6, generator=g).sort(-1).values
    return [
        _sample("fmax", torch.fmax, a, b),
        _sample("fmin", torch.fmin, a, b),
        _sample("fmax_0d", torch.fmax, x, torch.tensor(0.25)),
        _sample("copysign_signed_zero", torch.copysign, x[0], torch.tensor([-0.0, 0.0, -1.0, 2.0, -0.0])),
        _sample("copysign_scalar", lambda t: torch.copysign(t, -1.0), x),
        _sample("angle", torch.angle, torch.tensor([-1.0, 0.0, 2.0, nan, -inf])),
        _sample("hypot", torch.hypot, x, torch.flip(x, [0])),
        _sample("erfc", torch.erfc, torch.tensor([-3.0, -0.2, 0.0, 0.7, 3.5, 9.0])),
        _sample("lgamma", torch.lgamma, torch.tensor([-2.5, -0.5, 0.25, 1.0, 2.0, 3.7, 12.0])),
        _sample("digamma", torch.digamma, torch.tensor([-2.5, -0.5, 0.25, 1.0, 2.0, 3.7, 12.0])),
        _sample("reciprocal_int", torch.reciprocal, ints),
        _sample("erf_int", torch.erf, ints),
        _sample("all_dims", lambda t: torch.all(t > -1.0, dim=(0, 1)), x),
        _sample("cumprod", lambda t: torch.cumprod(t, 1), x),
        _sample("cumprod_int", lambda t: torch.cumprod(t, 0), ints),
        _sample("narrow_copy", lambda t: torch.narrow_copy(t, 1, 1, 3), x),
        _sample("slice_scatter", lambda t, s: torch.slice_scatter(t, s, 1, 1, 5, 2), x, torch.ones(4, 2)),
        _sample("diagonal_scatter", lambda t, s: torch.diagonal_scatter(t, s, 1), x, torch.arange(4.0)),
        _sample("as_strided_scatter", lambda t, s: torch.as_strided_scatter(t, s, (2, 2), (5, 2), 1), x, torch.ones(2, 2)),
        _sample("addbmm_int", lambda t, p, q: torch.addbmm(t, p, q, beta=2.6, alpha=1.2), ints[:2, :3],
                ints[:2, :2].reshape(2, 1, 2).expand(2, 2, 2).contiguous(), ints[2:, :3].reshape(2, 1, 3).expand(2, 2, 3).contiguous()),
        _sample("searchsorted", torch.searchsorted, seq, torch.randn(3, 4, generator=g)),
        _sample("searchsorted_right", lambda s, v: torch.searchsorted(s, v, right=True), seq[0], seq[0][[1, 3]]),
        _sample("scatter_reduce_amax", lambda t, i, v: torch.scatter_reduce(t, 0, i, v, "amax", include_self=False), x,
                torch.tensor([[0, 0, 3, 1, 1], [3, 3, 0, 0, 2]]), torch.randn(2, 5, generator=g)),
        _sample("index_reduce_mean", lambda t, v: torch.index_reduce(t, 1, torch.tensor([4, 0, 4]), v, "mean"), x,
                torch.randn(4, 3, generator=g)),
        _sample("polygamma_1", lambda t: torch.polygamma(1, t), torch.tensor([-2.5, 0.25, 1.0, 3.7, 12.0])),
        _sample("i1e", torch.special.i1e, torch.tensor([-20.0, -3.0, 0.0, 0.5, 14.9, 15.1, 40.0])),
        _sample("erfinv", torch.erfinv, torch.tensor([-0.999, -0.5, 0.0, 0.3, 0.9999])),
        _sample("cummax", lambda t: torch.cummax(t, 1), torch.tensor([[1.0, 1.0, 0.0, 2.0], [3.0, -1.0, 3.0, 4.0]])),
        _sample("max_dim_0d", lambda t: torch.max(t, 0), torch.tensor(2.5)),
        _sample("max_dim_bool", lambda t: torch.max(t, 1), ints > 0),
        _sample("min_dim_bool", lambda t: torch.min(t, 0), ints > 0),
        _sample("unfold_0d", lambda t: t.unfold(0, 1, 1), torch.tensor(2.5)),
        # the edges (found by the op lane's edge variant): IREE's sin(pi x) is about 6e-8 off
        # absolutely, which the reflections divide by; huge arguments; eager's order of a product
        _sample("lgamma_edges", torch.lgamma, torch.tensor([-1e-10, -9.4e-34, -1e-20, 1e5, 3.8e35, 2.9e37, -2.5])),
        _sample("digamma_tiny_negative", torch.digamma, torch.tensor([-1e-10, -1e-17, -4.5, 1e30])),
        _sample("polygamma_1_infinities", lambda t: torch.polygamma(1, t), torch.tensor([inf, -inf, -1.2e38, 3.0])),
        _sample("i0_huge", torch.i0, torch.tensor([3e38, -2.5e38, 80.0, 90.0])),
        _sample("cumprod_order", lambda t: torch.cumprod(t, 0), torch.tensor([0.6, inf, -2.5, -0.0, -inf])),
        # a NaN is the extreme of its slice, at its first position (torch-mlir's reduction passed it over)
        _sample("max_dim_nan", lambda t: torch.max(t, 1), torch.tensor([[1.0, nan, 3.0, nan], [inf, -inf, 2.0, inf], [5.0, 5.0, 1.0, -0.0]])),
        _sample("min_dim_nan_keepdim", lambda t: torch.min(t, 0, keepdim=True), torch.tensor([[1.0, 2.0], [nan, -inf], [0.5, nan]])),
        _sample("argmax_nan", lambda t: torch.argmax(t, -1), torch.tensor([[1.0, nan, 3.0], [2.0, 7.0, 7.0]])),
        _sample("argmin_flat_keepdim", lambda t: torch.argmin(t, keepdim=True), torch.tensor([[4.0, -1.0], [-1.0, nan]])),
        _sample("argmax_half", lambda t: torch.argmax(t, 0), torch.tensor([[1.0, 2.0], [3.0, -1.0]], dtype=torch.float16)),
        _sample("scatter_mean_int64_bounds", lambda t, i, v: torch.scatter_reduce(t, 0, i, v, "mean"),
                torch.tensor([-9223372036853779081, 9223372036854689449, -7, 5]), torch.tensor([0, 1, 2, 2]),
                torch.tensor([3, -2, 4, -8])),
    ]


@pytest.mark.filterwarnings("ignore:index_reduce")
def test_each_rewrite_compiles_runs_and_matches_eager(prober):
    samples = _samples()
    problems = prober.compile_and_run(samples)
    assert {s.name: p for s, p in zip(samples, problems) if p is not None} == {}


def test_values_with_no_elements_compile_as_constants_and_keep_their_shapes(prober):
    x = torch.randn(3, 4)
    samples = [
        _sample("slice_to_nothing", lambda t: t[:, :0] * 2, x),
        _sample("new_zeros_empty", lambda t: t.new_zeros((2, 0)), x),
        _sample("index_of_empty", lambda t: t[:0][:, torch.tensor([0, 2])], x),
        _sample("nonzero_static_0", lambda t: torch.nonzero_static(t, size=0), x),
    ]
    assert prober.compile_and_run(samples) == [None] * len(samples)


def test_the_zero_size_pass_removes_the_computation_and_leaves_a_literal():
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(lambda t: (t[:, :0] * 2, t + 1), decomposition_table=decomposition_table(), tracing_mode="fake")(torch.randn(3, 4))
    lowered = lower_to_stablehlo(gm, graph_name="zero_size")
    ops = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
    assert "aten.mul.Tensor" not in ops and "aten.add.Tensor" in ops  # the empty product is gone, the rest stays
    assert "tensor<3x0xf32>" in lowered.hlo and "constant" in lowered.hlo and "multiply" not in lowered.hlo
    assert [list(s.shape) for s in lowered.output_specs] == [[3, 0], [3, 4]]
    # a uint8 value keeps its node: torch-mlir legalizes no uint8 literal (batch norm's empty
    # reserve output is one)
    gm = make_fx(lambda t: (t + 1, torch.empty(0, dtype=torch.uint8)), tracing_mode="fake")(torch.randn(3))
    lowered = lower_to_stablehlo(gm, graph_name="zero_size_uint8")
    assert [s.dtype for s in lowered.output_specs] == ["float32", "uint8"]


def test_an_effect_token_keeps_its_op_when_everything_else_is_empty():
    """``linalg.cholesky`` of a 0x0 matrix: every value is empty, and so is the effect token its
    error check returns; the token must stay ``with_effects``'s (the compiled call was handed None
    for it once the whole graph had become constants)."""
    import torch._dynamo

    torch._dynamo.reset()
    out = torch.compile(lambda t: torch.linalg.cholesky(t, upper=True), backend="neuron")(torch.randn(0, 0))
    assert out.shape == (0, 0) and out.dtype == torch.float32
