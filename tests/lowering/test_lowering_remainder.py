"""``remainder`` keeps Python's sign rule (the divisor's) once lowered, compiled by IREE and run:
by a tensor and by a Python number, floats and int64, divisors of either sign. Each call form is
compiled as a graph of its own through the real lowering, compiler and runtime (the op-table
prober's path)."""

from __future__ import annotations

import math

import pytest
import torch

from reference.lowering import optable

X_FLOAT = torch.tensor([-7.0, 7.0, -0.5, 3.0, 2.5, 0.0, 0.3, 0.9])
X_INT = torch.tensor([-7, 7, -6, 6, 0, 5, -1, 1])


@pytest.fixture(scope="module")
def prober():
    return optable.Prober()


@pytest.mark.parametrize(
    "x, other",
    [
        (optable.sample_inputs()[0], 2), (X_FLOAT, 2), (X_FLOAT, -3), (X_FLOAT, 2.5), (X_INT, 3), (X_INT, -3),
        (X_FLOAT, torch.tensor([3.0, -3.0, 2.0, -1.5, 2.5, 1.0, 2.0, -2.0])),
        (X_INT, torch.tensor([3, -3, 4, -4, 2, 5, 2, -2])),
        (X_FLOAT, torch.tensor([math.inf, -math.inf, -math.inf, math.inf, -math.inf, math.inf, 2.0, -math.inf])),
    ],
    ids=["unit-interval-by-2", "float-by-2", "float-by-minus-3", "float-by-2.5", "int-by-3", "int-by-minus-3", "float-by-tensor",
         "int-by-tensor", "float-by-infinities"],
)
def test_compiled_remainder_has_the_sign_of_the_divisor_like_eager(prober, x, other):
    sample = optable.Sample("remainder", torch.remainder, (x, other), torch.remainder(x, other))
    assert prober.compile_and_run([sample]) == [None]
