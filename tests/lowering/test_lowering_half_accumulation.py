"""Matrix products, convolutions, cumulative sums and vector norms of float16/bfloat16 operands
accumulate in float32 and round once, as eager's CPU kernels do (``accumulating_in_float32`` in
``reference/lowering/decompositions.py``; found by the op lane's rows ``bmm``, ``conv3d``,
``conv_transpose1d``, ``linalg.vector_norm`` float16 and ``cumsum`` bfloat16). Each case is chosen
so that a sum kept in the half type cannot match: past 2048 a float16 sum of ones stops growing,
a bfloat16 running sum of 0.01 stalls near 2, and 9**6 overflows float16. Compiled through the
real backend (lowering, IREE, runtime) and held to the suite's tolerance for the dtype."""

from __future__ import annotations

import pytest
import torch


TOLERANCE = {torch.float16: (1e-2, 1e-3), torch.bfloat16: (2e-2, 1e-2)}

CASES = {
    # 4096 products of ones: float16 holds integers exactly only up to 2048
    "bmm-float16": (torch.bmm, lambda: (torch.ones(2, 3, 4096, dtype=torch.float16), torch.ones(2, 4096, 5, dtype=torch.float16))),
    "mm-float16": (torch.mm, lambda: (torch.ones(3, 4096, dtype=torch.float16), torch.ones(4096, 2, dtype=torch.float16))),
    # a running sum of 1000 x 0.01: in bfloat16 it stalls once 0.01 is below half a step
    "cumsum-bfloat16": (lambda x: torch.cumsum(x, 0), lambda: (torch.full((1000,), 0.01, dtype=torch.bfloat16),)),
    # 9**6 = 531441 is past float16's 65504: only a float32 accumulator gives eager's finite norm
    "vector_norm-ord6-float16": (lambda x: torch.linalg.vector_norm(x, ord=6), lambda: (torch.full((4,), 9.0, dtype=torch.float16),)),
    # a 1-d convolution over 3000 taps of ones
    "conv1d-float16": (torch.nn.functional.conv1d, lambda: (torch.ones(1, 1, 3000, dtype=torch.float16), torch.ones(1, 1, 3000, dtype=torch.float16))),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_half_accumulation_matches_eager(case):
    fn, make = CASES[case]
    args = make()
    want = fn(*args)
    torch._dynamo.reset()
    got = torch.compile(fn, backend="neuron", fullgraph=True)(*args)
    assert got.dtype == want.dtype, "the result keeps its declared type"
    rtol, atol = TOLERANCE[want.dtype]
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol)
