"""A Python float in a graph (``x * 0.1``, an epsilon, a scale) is lowered as the float32 nearest
to it, the value eager's float32 kernels use (``_literals_as_eager_uses_them`` in
``reference/lowering/stablehlo.py``). IREE demotes the float64 constant torch-mlir emits to float32
rounding toward zero, one unit in the last place below whenever the nearest float32 lies above:
``x * 0.1`` came out 0.099999994 for x = 1, and nearest-exact interpolation from 4 to 3 elements
read source element 1 instead of 2 (the op lane's rows ``nn.functional.interpolate.nearest-exact``).
A clamp's float bound on a float16/bfloat16 tensor is lowered as the nearest value of that type:
iree-compile rejected the graph when the bound's conversion was inexact (``x.clamp(min=0.1)``, the
op lane's rows ``nn.functional.normalize`` float16/bfloat16, whose epsilon is 1e-12).
Compiled through the real backend (lowering, IREE, runtime); results must be bit-exact."""

from __future__ import annotations

import math
import struct

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from reference.lowering import stablehlo
from reference.lowering.stablehlo import decomposition_table, lower_to_stablehlo


def _toward_zero(value: float) -> float:
    """The float32 next to ``value`` on the side of zero (what IREE's demotion gives)."""
    nearest = struct.unpack("f", struct.pack("f", value))[0]
    if abs(nearest) <= abs(value):
        return nearest
    bits = struct.unpack("<I", struct.pack("<f", nearest))[0]
    return struct.unpack("<f", struct.pack("<I", bits - 1))[0]


# Each of these has its nearest float32 above it in magnitude, so rounding toward zero differs.
LITERALS = (0.1, 1 / 3, 2 / 3, -2 / 3, 4 / 3, math.pi, 0.3, -1.1)


def _compiled(fn):
    torch._dynamo.reset()
    return torch.compile(fn, backend="neuron", fullgraph=True)


def test_the_literals_are_ones_that_rounding_toward_zero_gets_wrong():
    for c in LITERALS:
        assert _toward_zero(c) != struct.unpack("f", struct.pack("f", c))[0], c


def test_a_float32_tensor_times_a_float_literal_is_bit_exact():
    def fn(x):
        return torch.stack([x * c for c in LITERALS] + [x + c for c in LITERALS])

    x = torch.linspace(-3, 3, 13)
    want = fn(x)
    got = _compiled(fn)(x)
    mismatched = [i for i in range(want.shape[0]) if not torch.equal(got[i], want[i])]
    assert not mismatched, f"rows off from eager: {mismatched}, max error {(got - want).abs().max().item()}"


@pytest.mark.parametrize("size_in,size_out", [(4, 3), (7, 5), (5, 3), (10, 7)])
def test_nearest_exact_interpolation_reads_eagers_source_elements(size_in, size_out):
    def fn(x):
        return F.interpolate(x, size=(size_out, size_out), mode="nearest-exact")

    x = torch.arange(float(size_in * size_in)).reshape(1, 1, size_in, size_in)
    assert torch.equal(_compiled(fn)(x), fn(x))


def test_the_graph_keeps_its_own_literals_and_the_text_states_the_float32():
    gm = make_fx(lambda x: x * 0.1, decomposition_table=decomposition_table())(torch.ones(3))
    hlo = lower_to_stablehlo(gm, graph_name="literal").hlo
    (mul,) = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert mul.args[1] == 0.1, "an eager run of the same graph still multiplies by the float64 literal"
    assert "0.10000000149011612" in hlo and "1.000000e-01" not in hlo, hlo


HALF_CLAMPS = {
    "clamp-min": lambda x: x.clamp(min=0.1),
    "clamp-max": lambda x: x.clamp(max=-0.3),
    "clamp-both": lambda x: x.clamp(-0.7, 0.1),
    "clamp_min": lambda x: torch.clamp_min(x, 1e-12),
    "normalize": lambda x: F.normalize(x, dim=1),
}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", sorted(HALF_CLAMPS))
def test_a_clamp_of_a_half_tensor_by_a_float_bound_compiles_and_matches_eager(case, dtype):
    fn = HALF_CLAMPS[case]
    x = torch.linspace(-1, 1, 24).reshape(4, 6).to(dtype)
    want = fn(x)
    got = _compiled(fn)(x)
    assert got.dtype == dtype
    assert torch.equal(got, want), f"max error {(got.float() - want.float()).abs().max().item()}"


@pytest.mark.parametrize("value", [1e300, -1e300, math.inf, -math.inf, 3.5e38])
def test_literals_past_float32s_range_are_left_as_they_are(value):
    assert stablehlo._nearest_float32(value) == value


def test_nan_stays_nan_and_float32_values_stay_exact():
    assert math.isnan(stablehlo._nearest_float32(math.nan))
    for exact in (0.5, -2.0, 0.25, 3.4028234663852886e38):
        assert stablehlo._nearest_float32(exact) == exact
