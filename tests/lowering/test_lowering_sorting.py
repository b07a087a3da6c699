"""sort/argsort/topk decompositions: they compile with the installed tools and match eager, ties
ordered by index (lower first) like ``torch.sort(stable=True)``.

The properties run the decompositions eagerly (the same tensor program the compiler gets, fast);
the compiled cases go through the real backend (lowering, IREE, runtime)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, strategies as st

import reference  # noqa: F401  (registers the backends)
from reference.lowering import sorting
from reference.lowering.stablehlo import decomposition_table

aten = torch.ops.aten


def _tied(shape, dtype, seed=0, levels=3):
    """Values with many ties (a few distinct levels), plus NaN, -0.0 and -inf where floats."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, levels, shape, generator=g).to(dtype)
    if dtype.is_floating_point and x.numel() >= 4:
        flat = x.view(-1)
        flat[1], flat[2], flat[3] = float("nan"), -0.0, float("-inf")
    return x


def test_the_backend_table_holds_the_decompositions():
    table = decomposition_table()
    for op in (aten.sort.default, aten.sort.stable, aten.topk.default, aten.fmod.Scalar):
        assert op in table, op


@given(
    n=st.integers(1, 40),
    rows=st.integers(1, 3),
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.uint8]),
    descending=st.booleans(),
    dim=st.sampled_from([0, 1, -1]),
    seed=st.integers(0, 2**16),
)
def test_sort_equals_eager_stable_sort_ties_included(n, rows, dtype, descending, dim, seed):
    x = _tied((rows, n), dtype, seed)
    values, indices = sorting.sort(x, dim, descending)
    want = torch.sort(x, dim=dim, descending=descending, stable=True)
    assert torch.equal(indices, want.indices)
    assert torch.equal(values, want.values) or torch.allclose(values.float(), want.values.float(), equal_nan=True)


@given(n=st.integers(1, 40), k=st.integers(1, 40), largest=st.booleans(), seed=st.integers(0, 2**16))
def test_topk_is_the_head_of_the_stable_sort(n, k, largest, seed):
    k = min(k, n)
    x = _tied((2, n), torch.float32, seed)
    values, indices = sorting.topk(x, k, -1, largest)
    want = torch.sort(x, dim=-1, descending=largest, stable=True)
    assert torch.equal(indices, want.indices[:, :k])
    assert torch.allclose(values, want.values[:, :k], equal_nan=True)
    # eager topk agrees on the values (its order among ties is unspecified)
    assert torch.allclose(values, torch.topk(x, k, largest=largest).values, equal_nan=True)


def _compiled(fn, *args):
    torch._dynamo.reset()
    return torch.compile(fn, backend="neuron")(*args)


def _router(logits):
    probs = torch.softmax(logits, dim=-1)
    weights, experts = torch.topk(probs, 2, dim=-1)
    return weights / weights.sum(-1, keepdim=True), experts


def test_a_mixtral_style_router_compiles_and_matches_eager():
    logits = torch.randn(16, 4, generator=torch.Generator().manual_seed(3))
    weights, experts = _compiled(_router, logits)
    want_w, want_e = _router(logits)
    assert torch.equal(experts, want_e)  # random logits: no ties, so eager's order is the only one
    torch.testing.assert_close(weights, want_w, rtol=1e-5, atol=1e-6)


def _head(k):
    def expected(x):
        s = torch.sort(x, stable=True)
        return s.values[:, :k], s.indices[:, :k]
    return expected


@pytest.mark.parametrize(
    "fn, expected",
    [
        pytest.param(lambda x: torch.sort(x, dim=1, descending=True, stable=True), None, id="sort-desc-stable"),
        pytest.param(lambda x: (torch.argsort(x, dim=0, stable=True),), None, id="argsort-dim0-stable"),
        pytest.param(lambda x: torch.sort(x), lambda x: torch.sort(x, stable=True), id="sort-unstable-flag"),
        pytest.param(lambda x: torch.topk(x, 3, largest=False), _head(3), id="topk-smallest"),
    ],
)
def test_compiled_sorts_follow_the_stable_order_with_ties_nan_and_signed_zero(fn, expected):
    # Without stable=True eager's order among ties is unspecified; the backend's is the stable one.
    x = _tied((3, 9), torch.float32)
    got = _compiled(fn, x)
    want = (expected or fn)(x)
    for g, w in zip(got, want):
        assert torch.equal(g, w) or torch.allclose(g, w, equal_nan=True)
    assert torch.equal(got[-1], want[-1])  # indices exactly


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bfloat16])
def test_compiled_topk_of_other_dtypes(dtype):
    x = _tied((4, 9), dtype, seed=5)
    values, indices = _compiled(lambda t: torch.topk(t, 2), x)
    want = torch.sort(x, descending=True, stable=True)
    assert torch.equal(indices, want.indices[:, :2])
    assert torch.equal(values, want.values[:, :2]) or torch.allclose(values, want.values[:, :2], equal_nan=True)


def test_fmod_with_a_python_scalar_compiles():
    x = torch.arange(-6, 7)
    assert torch.equal(_compiled(lambda t: torch.fmod(t + 3, 4), x), torch.fmod(x + 3, 4))
    y = torch.linspace(-7, 7, 11)
    torch.testing.assert_close(_compiled(lambda t: torch.fmod(t, 4), y), torch.fmod(y, 4))
