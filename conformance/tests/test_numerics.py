"""Contract: numerics at the edges of every dtype, and no precision change without a word.

The parity tests compare with eager on values of ``randn`` size, where a backend that computes
bfloat16 through float16, flushes subnormals, or computes float64 as float32 still matches. Here:

- **At the edges** (:func:`test_graphs_that_matter_in_models_match_eager_at_the_edges`): per float
  dtype and int64, per region of its range (``conformance/harness/edges.py``: bfloat16 beyond
  float16's range and below its normal range; float16 near its max and its subnormals; float32
  large, tiny and subnormal; inf, -inf, nan and -0.0; int64 near its bounds, where eager wraps, and
  division there), one graph of what models compute (matmul, softmax, log-softmax, sum, amax, layer
  norm, an elementwise chain, casts), compiled and compared output by output with eager. A
  difference names the dtype, the edge and the op. A dtype the implementation declares computing in
  a narrower one (``precision()``) is held at the narrower one's edges.
- **Declared** (:func:`test_each_float_dtype_is_computed_as_declared`): a probe whose result keeps
  a dtype's precision only when computed in that dtype; one computed in a narrower dtype than
  ``precision()`` declares fails as an undeclared loss of precision, naming the dtype it matches.
- **Announced** (:func:`test_a_declared_precision_change_is_announced_when_it_happens`): for each
  change ``precision()`` declares (float64 computed as float32, ...), a graph of that dtype must
  warn, naming both dtypes, when it is compiled or run (read through ``warnings_given``).

A ``precision()`` that raises or names something that is not a torch dtype is a collection error
of this module naming the adapter's method.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conformance.harness import edges as E
from conformance.harness.implementation import NotSupported
from conformance.harness.precision import LADDER
from conformance.harness.tolerances import assert_close, declared_precision
from conformance.harness.warnings_given import warnings_given
from conformance.plugin import SUITE

pytestmark = pytest.mark.contract("numerics")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if not {"edge", "changed"} & set(metafunc.fixturenames):
        return
    try:
        precision = declared_precision(metafunc.config.stash[SUITE].impl())  # a bad declaration: a collection error
    except NotSupported as exc:  # no declaration: nothing to hold the results to (the other modules skip too)
        for name in {"edge", "changed"} & set(metafunc.fixturenames):
            metafunc.parametrize(name, [pytest.param(None, marks=pytest.mark.skip(
                reason=f"precision() not supported: {exc}"))], ids=["no-precision"])
        return
    if "edge" in metafunc.fixturenames:
        found = [e for d in LADDER for e in E.edges_for(d, precision.computed_as(d))] + E.edges_for("int64", "int64")
        metafunc.parametrize("edge", found, ids=[e.id for e in found])
    if "changed" in metafunc.fixturenames:
        pairs = sorted(precision.computes.items())
        if pairs:
            metafunc.parametrize("changed", pairs, ids=[f"{a}-as-{b}" for a, b in pairs])
        else:
            metafunc.parametrize("changed", [pytest.param(None, marks=pytest.mark.skip(
                reason=f"precision() declares no change: {precision.describe()}"))], ids=["none-declared"])


# --- the graphs ------------------------------------------------------------------------------------

#: The outputs of :func:`_float_graph`, in order; zeros keep their sign (IEEE fixes it) in these.
FLOAT_OPS = ("matmul", "softmax", "log_softmax", "sum", "amax", "layer_norm", "elementwise", "cast_float32", "cast_float16")
SIGNED_ZEROS = frozenset({"elementwise", "cast_float32", "cast_float16"})


def _float_graph(x, xs, xl, w):
    """What models compute, each on the input that keeps it in range in any order of evaluation:
    ``x`` the edge's values (up to its max), ``xs`` the same band divided by ``2 * K`` (sums of K
    never overflow), ``xl`` capped so that layer norm's variance fits its compute dtype."""
    return (
        xs @ w,
        torch.softmax(xs, dim=-1),
        torch.log_softmax(xs, dim=-1),
        xs.sum(dim=-1),
        xs.amax(dim=-1),
        F.layer_norm(xl, (xl.shape[-1],)),
        torch.tanh(x) * 0.5 + (x * 0.25 + x * 0.125) * 2.0,
        x.to(torch.float32),
        x.to(torch.float16),
    )


INT_OPS = {
    E.BOUNDS: ("add", "sub", "mul", "neg", "abs", "sum", "amax", "matmul", "cast_float32", "cast_float64"),
    E.DIVISION: ("floor_divide", "remainder", "trunc_divide"),
}


def _int_bounds_graph(a, b):
    return (a + b, a - b, a * 3, -a, a.abs(), a.sum(dim=-1), a.amax(dim=-1), a @ b.transpose(0, 1),
            a.to(torch.float32), a.to(torch.float64))


def _int_division_graph(a, b):
    return a // b, a % b, torch.div(a, b, rounding_mode="trunc")


_ROWS = 5  # plant_specials needs five rows


def _opmath_max(edge: E.Edge) -> float:
    """The largest value eager's layer norm squares without overflow: it computes half types and
    float32 in float32, float64 in float64."""
    return torch.finfo(torch.float64 if edge.of == "float64" else torch.float32).max


def _inputs(edge: E.Edge) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(sum(map(ord, edge.id)))
    shape = (_ROWS, E.K)
    if edge.dtype == "int64":
        a = E.int64_near_bounds(shape, g)
        if edge.name == E.DIVISION:  # divisors away from 0 and -1 (-2**63 // -1 traps in eager)
            b = torch.randint(2, 1000, shape, generator=g) * torch.where(torch.rand(shape, generator=g) < 0.5, -1, 1)
        else:
            b = E.int64_near_bounds(shape, g)
        return a, b
    dtype = edge.torch_dtype
    w = (torch.empty(E.K, 3, dtype=torch.float64).uniform_(0.5, 1.0, generator=g) / E.K
         * torch.where(torch.rand(E.K, 3, generator=g) < 0.5, -1.0, 1.0)).to(dtype)
    if edge.name == E.SPECIALS:
        x = E.plant_specials(torch.randn(shape, generator=g).to(dtype))
        return x, x.clone(), x.clone(), w
    scale = 1.0 / (2 * E.K) if edge.hi > 1 else 1.0
    cap = (_opmath_max(edge) ** 0.5) / E.K
    return edge.band(shape, g), edge.band(shape, g, scale=scale), edge.band(shape, g, cap=cap), w


def _graph(edge: E.Edge):
    if edge.dtype != "int64":
        return _float_graph, FLOAT_OPS
    return (_int_bounds_graph if edge.name == E.BOUNDS else _int_division_graph), INT_OPS[edge.name]


# --- the tests -------------------------------------------------------------------------------------


@pytest.mark.evidence
@pytest.mark.spec("003.semantics.matches-eager")
def test_graphs_that_matter_in_models_match_eager_at_the_edges(impl, edge: E.Edge):
    fn, ops = _graph(edge)
    inputs = _inputs(edge)
    with torch.no_grad():
        expected = fn(*[t.clone() for t in inputs])
        actual = impl.compile(fn, fullgraph=True)(*inputs)
    assert isinstance(actual, (tuple, list)) and len(actual) == len(ops), f"{edge.describe()}: got {actual!r:.200}"
    problems = []
    for op, a, e in zip(ops, actual, expected):
        rtol, atol = edge.tolerance(e.dtype)
        why = E.difference(a, e, rtol, atol, signed_zeros=op in SIGNED_ZEROS)
        if why is not None:
            problems.append(f"{op}: {why}")
    assert not problems, (f"{edge.describe()}: the compiled graph differs from eager in {len(problems)} of "
                          f"{len(ops)} ops:\n  " + "\n  ".join(problems))


#: Per float dtype, (x, y) such that ``(x + y) - x`` keeps ``y`` when computed in the dtype and
#: loses it (gives 0) in every narrower dtype of the ladder, by more than the dtype's tolerance.
PROBES = {"float64": (1.0, 1e-8), "float32": (64.0, 5e-4), "float16": (1.0, 2.0 ** -9)}


def _kept(x, y):
    return (x + y) - x


@pytest.mark.evidence
@pytest.mark.spec("003.semantics.matches-eager")
@pytest.mark.parametrize("dtype", list(PROBES))
def test_each_float_dtype_is_computed_as_declared(impl, dtype: str):
    a, b = PROBES[dtype]
    t = getattr(torch, dtype)
    x = torch.full((8,), a, dtype=t)
    y = torch.full((8,), b, dtype=t) * torch.linspace(1.0, 1.5, 8, dtype=torch.float64).to(t)
    with torch.no_grad():
        actual = impl.compile(_kept, fullgraph=True)(x, y)
    assert_close(actual, _kept(x, y), what=f"{dtype} (x + y) - x with x = {a:g}, y about {b:g}")


def _product(x):
    """A matmul and an elementwise tail: what a change confined to matmuls (TF32, autocast) reaches too."""
    return (x @ x.transpose(0, 1)) * 0.5 + 1.0


def _named(message: str, dtype: str) -> bool:
    """Whether ``message`` names ``dtype`` (``float64``, ``tf32``, ...), in any case."""
    return dtype.lower() in message.lower()


@pytest.mark.evidence
def test_a_declared_precision_change_is_announced_when_it_happens(impl, changed: tuple[str, str]):
    """No seed statement says it; the suite's precision contract does (docs/backend_contract.md,
    "Precision"): a dtype computed in another is declared (``precision()``) and announced, each time
    a graph of that dtype is compiled or served, in a warning naming both dtypes."""
    caller, computed = changed
    x = torch.linspace(-2.0, 2.0, 12, dtype=torch.float64).reshape(3, 4).to(getattr(torch, caller))
    with warnings_given() as given:
        with torch.no_grad():
            actual = impl.compile(_product, fullgraph=True)(x)
    assert_close(actual, _product(x), what=f"{caller} graph")
    said = [m for m in given if _named(m, caller) and _named(m, computed)]
    assert said, (f"precision() declares {caller} computed as {computed}, but a {caller} graph compiled and ran "
                  f"without a warning naming both (warnings given: {given or 'none'}); warn, or log at WARNING, "
                  "whenever a graph of that dtype is compiled or served")
