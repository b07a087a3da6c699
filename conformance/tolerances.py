"""Per-dtype tolerances for comparing against torch eager, in one place.

The bounds are what a correct lowering and compiler must meet on the fixtures: float32 differences
come from reassociation and fused multiply-add in the compiled kernels; half types from their
8- and 11-bit mantissas.
"""

from __future__ import annotations

import torch

TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    # dtype: (rtol, atol)
    # float64 is computed in float32 on the device (no f64 units, as on Neuron) and widened back,
    # so it is held to float32's bounds; the dtype the caller sees is still float64.
    torch.float64: (1e-4, 1e-5),
    torch.float32: (1e-4, 1e-5),
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (2e-2, 1e-2),
}


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    return TOLERANCES.get(dtype, (0.0, 0.0))  # integers and bools: exact


def assert_close(actual, expected, *, what: str = "output") -> None:
    """Compare tensors (or nested lists/tuples of them) with the dtype's tolerance."""
    if isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple)) and len(actual) == len(expected), (
            f"{what}: expected {len(expected)} values, got {actual!r:.200}"
        )
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_close(a, e, what=f"{what}[{i}]")
        return
    assert isinstance(actual, torch.Tensor), f"{what}: expected a tensor, got {type(actual).__name__}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype}, eager gives {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)}, eager gives {tuple(expected.shape)}"
    rtol, atol = tolerance(expected.dtype)
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")
