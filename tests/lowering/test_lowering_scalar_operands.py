"""Ops whose compile failed naming a Python scalar operand (``torch.constant.int`` /
``torch.constant.bool`` does not legalize), found by the op lane (float32 rows ``argmax``,
``argmin``, ``masked.argmax``, ``masked.argmin``, ``cumsum`` on 0-d inputs;
``diagonal``, ``diag``, ``trace``, ``linalg.diagonal``, ``diagonal_copy``, ``unfold``,
``unfold_copy``, ``view_copy``, ``permute_copy``, ``unbind_copy``, ``as_strided_copy``).

The cause is one: torch-mlir converts an ATen op together with its constant operands, and when it
has no pattern for the op (or for the op on a 0-d tensor) the conversion names the first illegal
operation it meets, the constant. The fixes: decompositions (``reference/lowering/decompositions.py``)
that give those ops a form torch-mlir lowers; the lowering names the op behind the constant
(``LoweringError.constant_users``), so the op table's probe condemns such an op (``kthvalue``,
``cumprod``) and the graph breaks instead of the compile failing.

Each call form is compiled as a graph of its own through the real lowering, IREE's compiler and
runtime (the op-table prober's path) and compared with eager.
"""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from reference.core.errors import LoweringError
from reference.lowering import optable
from reference.lowering.stablehlo import decomposition_table, lower_to_stablehlo

X = torch.tensor([[0.5, -1.0, 2.0, 0.25], [3.0, -0.5, 1.5, -2.0], [0.0, 4.0, -3.0, 1.0], [2.5, 0.75, -1.25, 0.1]])
X3 = torch.arange(60, dtype=torch.float32).reshape(3, 4, 5) / 7 - 4
I64 = torch.tensor([[3, -7, 2], [0, 5, -1], [9, -2, 4]])
ZERO_D = torch.tensor(-2.5)


@pytest.fixture(scope="module")
def prober():
    return optable.Prober()


CASES = {
    # 0-d inputs: argmax/argmin (the Python bool keepdim), cumsum (the Python int dim)
    "argmax-0d": (torch.argmax, (ZERO_D,)),
    "argmin-0d-dim-keepdim": (lambda t: torch.argmin(t, 0, True), (ZERO_D,)),
    "cumsum-0d": (lambda t: torch.cumsum(t, 0), (ZERO_D,)),
    "cumsum-0d-int64": (lambda t: torch.cumsum(t, -1), (torch.tensor(7),)),
    "logcumsumexp-3d": (lambda t: torch.logcumsumexp(t, 0), (X3,)),  # kept as the op: right
    # sum of a 0-d bool or int64 tensor is int64 (sum, count_nonzero int64/bool rows)
    "sum-0d-bool": (lambda t: torch.sum(t, 0), (torch.tensor(True),)),
    "count_nonzero-0d-int64": (torch.count_nonzero, (torch.tensor(3),)),
    # ops with no pattern of their own: their decompositions
    "diagonal": (torch.diagonal, (X,)),
    "diagonal-offset": (lambda t: torch.diagonal(t, -1), (X,)),
    "diagonal-3d-dims": (lambda t: torch.diagonal(t, 1, 0, 2), (X3,)),
    "diag-of-matrix": (lambda t: torch.diag(t, 1), (X,)),
    "trace-float32": (torch.trace, (X,)),
    "trace-int64": (torch.trace, (I64,)),
    "unfold": (lambda t: t.unfold(1, 2, 1), (X3,)),
    "unfold_copy": (lambda t: torch.unfold_copy(t, 0, 2, 2), (X,)),
    "view_copy": (lambda t: torch.view_copy(t, (12, 5)), (X3,)),
    "permute_copy": (lambda t: torch.permute_copy(t, (2, 0, 1)), (X3,)),
    "unbind_copy": (lambda t: torch.unbind_copy(t, 1), (X,)),
    "as_strided_copy": (lambda t: torch.as_strided_copy(t, (2, 3), (1, 2), 1), (X.reshape(-1),)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_call_compiles_runs_and_matches_eager(prober, case):
    fn, args = CASES[case]
    sample = optable.Sample(case, fn, args, fn(*args))
    assert prober.compile_and_run([sample]) == [None]


def _lowering_error(fn, *args) -> LoweringError:
    gm = make_fx(fn, decomposition_table=decomposition_table())(*args)
    with pytest.raises(LoweringError) as info:
        lower_to_stablehlo(gm, graph_name="scalar_operands")
    return info.value


def test_a_failure_on_a_constant_names_the_op_that_takes_it():
    # kthvalue has no pattern in torch-mlir: the conversion stops at its Python bool operand
    error = _lowering_error(lambda t: torch.kthvalue(t, 2), X3)
    assert error.ops == ["torch.constant.bool"]
    assert error.constant_users == ["torch.aten.kthvalue"]
    # an op torch-mlir itself names is not re-attributed
    error = _lowering_error(torch.special.bessel_j0, X)
    assert error.ops == ["torch.aten.special_bessel_j0"] and error.constant_users == []


def test_the_probe_condemns_the_op_behind_the_constant_and_probes_the_submodules(prober):
    reason, probed = prober.lower(optable.make_samples("kthvalue")[0])
    assert probed and "torch.aten.kthvalue" in reason
    # cumprod runs eagerly on the probe's 4x4 input only with dimension 1 (the dimension form);
    # it lowers since the backend writes it as a product over a triangle (lowering.op_rewrites)
    samples = optable.make_samples("cumprod")
    assert [s.args[1] for s in samples] == [1]
    assert prober.lower(samples[0])[0] is None
    # torch.special / linalg / fft functions are candidates under the name the rule reads
    names = optable.candidate_names()
    for name in ("special_bessel_j0", "linalg_det", "fft_fft"):
        assert name in names
    assert optable.make_samples("special_bessel_j0")[0].fn is torch.special.bessel_j0
    # where's one-argument form is nonzero, which says nothing about where(cond, x, y)
    assert all(prober.lower(s)[0] is None for s in optable.make_samples("where"))


def test_the_checked_in_table_breaks_on_them():
    ops = optable.load_table()["ops"]
    for name in ("kthvalue", "median", "special_bessel_j0", "linalg_det", "fft_fft", "special_zeta"):
        assert name in ops, name
    for compiles in ("where", "diagonal", "trace", "argmax", "cumsum", "unfold", "cumprod", "special_erfcx", "lgamma"):
        assert compiles not in ops, compiles


@pytest.mark.parametrize("op", [torch.special.bessel_j0, torch.linalg.det, lambda t: torch.kthvalue(t, 2).values],
                         ids=["special.bessel_j0", "linalg.det", "kthvalue"])
def test_through_the_backend_the_op_breaks_the_graph_and_matches_eager(op):
    """The whole path (Dynamo, the graph-break hook reading the regenerated table, the compile of
    what is left, IREE): the op runs eagerly between compiled graphs instead of failing the compile."""
    from torch._dynamo.utils import counters

    from reference.backends.graph_breaks import GB_TYPE

    def f(t):
        return op(t * 2) + 1

    torch._dynamo.reset()
    counters["graph_break"].clear()
    try:
        got = torch.compile(f, backend="neuron")(X)
        assert torch.allclose(got, f(X), rtol=1e-5, atol=1e-5)
        assert any(GB_TYPE in reason or "op=" in reason for reason in counters["graph_break"]), dict(counters["graph_break"])
    finally:
        torch._dynamo.reset()
