"""``pow``, ``atan2`` and bool ``add`` as eager computes them once lowered, compiled by IREE and run
(found by the op lane's int64 and bool rows: ``float_power`` int64/bool and ``atan2`` bool read NaN,
``add`` bool read False for True + True). Each call form is compiled as a graph of its own through
the real lowering, compiler and runtime (the op-table prober's path) and compared with eager."""

from __future__ import annotations

import pytest
import torch

from reference.lowering import optable

INF, NAN = float("inf"), float("nan")
BASES = torch.tensor([2.0, -3.0, 4.0, 0.0, 5.0, -2.0, 0.0, -8.0, -1.0, -1.0, 1.0, -INF, -INF, INF, -0.5, 0.0, -0.0])
EXPONENTS = torch.tensor([3.0, 2.0, -1.0, 0.0, 7.0, 0.5, -1.0, 1 / 3, INF, 2.5, NAN, 3.0, 0.5, -2.0, INF, 0.5, -3.0])
B = torch.tensor([True, False, True, False])
C = torch.tensor([True, True, False, False])


@pytest.fixture(scope="module")
def prober():
    return optable.Prober()


CASES = {
    # a negative base, 0 ** 0, infinities, a negative zero (IREE's pow is exp(y * log(x)))
    "pow-tensor-float32": (torch.pow, (BASES, EXPONENTS)),
    "pow-tensor-float16": (torch.pow, (BASES.half(), EXPONENTS.half())),
    "pow-by-4.0": (lambda t: torch.pow(t, 4.0), (BASES,)),
    "pow-by-minus-3": (lambda t: torch.pow(t, -3), (BASES,)),
    "pow-by-7": (lambda t: torch.pow(t, 7), (BASES,)),
    "pow-by-2": (lambda t: torch.pow(t, 2), (BASES,)),
    "pow-of-minus-2": (lambda t: torch.pow(-2.0, t), (BASES,)),
    "pow-of-0": (lambda t: torch.pow(0.0, t), (BASES,)),
    "pow-of-10000": (lambda t: torch.pow(10000.0, t), (torch.linspace(0, 1, 8),)),
    # a positive base made inside the graph, int32 exponents (bloom's ALiBi slopes): the sign of an
    # odd power came out negative when the base's sign was the or of two comparisons
    "pow-of-a-graph-constant": (lambda e: torch.pow(torch.tensor(0.70710678), e), (torch.arange(1, 9, dtype=torch.int32),)),
    "pow-by-7-of-a-graph-constant": (lambda t: torch.pow(torch.tensor([0.5, 2.0]) + t, 7), (torch.zeros(2),)),
    "pow-int64": (torch.pow, (torch.tensor([2, -3, 4, 0, 5]), torch.tensor([3, 2, 1, 0, 7]))),
    "float_power-int64": (torch.float_power, (torch.tensor([2, -3, 4, 0, 5]), torch.tensor([3, 2, -1, 0, 7]))),
    "float_power-bool": (torch.float_power, (B, C)),
    # atan2 of two zeros (IREE gives NaN), with negative zeros
    "atan2-float32": (torch.atan2, (torch.tensor([0.0, 0.0, -0.0, 1.0, -0.0, 3.0]), torch.tensor([0.0, -0.0, 0.0, 0.0, -0.0, -2.0]))),
    "atan2-bool": (torch.atan2, (B, C)),
    "atan2-int64": (torch.atan2, (torch.tensor([0, 1, -2, 0]), torch.tensor([0, 0, 3, -1]))),
    # True + True is True (a 1-bit integer addition wrapped to False)
    "add-bool": (torch.add, (B, C)),
    "add-bool-0d": (torch.add, (torch.tensor(True), torch.tensor(True))),
    "add-bool-int64": (torch.add, (B, torch.tensor([3, 4, 5, 6]))),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_call_compiles_runs_and_matches_eager(prober, case):
    fn, args = CASES[case]
    sample = optable.Sample(case, fn, args, fn(*args))
    assert prober.compile_and_run([sample]) == [None]


def test_scatter_add_into_bool_is_a_logical_or(prober):
    """scatter_add bool (the op lane's row): two Trues landing on one element stay True."""
    x = torch.tensor([[False, True], [False, False], [True, False]])
    index = torch.tensor([[0, 0], [0, 1], [2, 0]])
    src = torch.tensor([[True, True], [True, True], [True, False]])
    fn = lambda a, i, b: torch.scatter_add(a, 0, i, b)  # noqa: E731
    sample = optable.Sample("scatter_add", fn, (x, index, src), fn(x, index, src))
    assert prober.compile_and_run([sample]) == [None]
    # other dtypes keep the op
    fn2 = lambda a, i, b: torch.scatter_add(a, 0, i, b)  # noqa: E731
    xf, sf = torch.zeros(3, 2), torch.ones(3, 2)
    assert prober.compile_and_run([optable.Sample("scatter_add", fn2, (xf, index, sf), fn2(xf, index, sf))]) == [None]


def test_index_add_and_accumulating_index_puts_into_bool_are_logical_ors(prober):
    """index_add bool and _unsafe_masked_index_put_accumulate bool (the op lane's rows), and
    index_put(accumulate=True) bool: two Trues landing on one element stay True."""
    x = torch.tensor([False, True, False, False])
    index = torch.tensor([0, 0, 2, 1])
    src = torch.tensor([True, True, False, True])
    add = lambda a, i, b: torch.index_add(a, 0, i, b)  # noqa: E731
    add_dim1 = lambda a, i, b: torch.index_add(a, 1, i, b)  # noqa: E731
    put = lambda a, i, b: torch.index_put(a, (i,), b, accumulate=True)  # noqa: E731
    masked = lambda a, m, i, b: torch.ops.aten._unsafe_masked_index_put_accumulate(a, m, [i], b)  # noqa: E731
    wide, ones = torch.zeros(3, 4, dtype=torch.bool), torch.ones(3, 3, dtype=torch.bool)
    mask = torch.tensor([True, True, False, True])
    samples = [
        optable.Sample("index_add", add, (x, index, src), add(x, index, src)),
        optable.Sample("index_add", add_dim1, (wide, torch.tensor([1, 1, 3]), ones), add_dim1(wide, torch.tensor([1, 1, 3]), ones)),
        optable.Sample("index_put", put, (x, index, src), put(x, index, src)),
        optable.Sample("_unsafe_masked_index_put_accumulate", masked, (x, mask, index, src), masked(x, mask, index, src)),
    ]
    assert [prober.compile_and_run([s]) for s in samples] == [[None]] * 4
    # other dtypes take the table's decomposition as before (index_add has no lowering of its own)
    xf, sf = torch.zeros(4), torch.ones(4)
    assert prober.compile_and_run([optable.Sample("index_add", add, (xf, index, sf), add(xf, index, sf))]) == [None]
    assert prober.compile_and_run([optable.Sample("index_put", put, (xf, index, sf), put(xf, index, sf))]) == [None]


#: clamp_min / clamp_max of bools by bool tensors are or / and (a signed 1-bit compare took True
#: for -1); shifts of operands of two shapes (torch-mlir's lowering of them aborted the process).
#: One batch: one compile for all of them.
BATCHED = {
    "clamp_min-bool": (torch.clamp_min, (B, torch.tensor(True))),
    "clamp_max-bool": (torch.clamp_max, (B, C)),
    "left_shift-broadcast": (torch.bitwise_left_shift, (torch.tensor([[1], [3]]), torch.tensor([[0, 1, 2], [3, 4, 63]]))),
    "right_shift-broadcast": (torch.bitwise_right_shift, (torch.tensor([[-64], [96]]), torch.tensor([1, 2, 5]))),
}


def test_bool_clamps_and_broadcast_shifts_compile_run_and_match_eager(prober):
    samples = [optable.Sample(name, fn, args, fn(*args)) for name, (fn, args) in sorted(BATCHED.items())]
    assert prober.compile_and_run(samples) == [None] * len(samples)
