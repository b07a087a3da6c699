"""Tolerances for comparing against torch eager, derived from the precision the implementation
declares (:class:`Precision`, ``Implementation.precision()``), in one place.

The bounds are what a correct lowering and compiler must meet on the fixtures when each dtype is
computed in itself: float64 and float32 differences come from reassociation and fused
multiply-add in the compiled kernels; half types from their 8- and 11-bit mantissas. An
implementation that computes a dtype in a narrower one (float64 on a device without f64 units,
float32 matmuls in TF32, float32 under bfloat16 autocast) declares it, and its results are held to
the narrower dtype's bounds. A result that only meets a narrower dtype's bounds than the declared
one is an undeclared loss of precision: :func:`assert_close` fails saying so.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from conformance.harness.precision import ALIASES, LADDER, Precision, dtype_name

TOLERANCES: dict[str, tuple[float, float]] = {
    # dtype: (rtol, atol), when the dtype is computed in itself
    "float64": (1e-9, 1e-11),
    "float32": (1e-4, 1e-5),
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
}


class _Policy:
    """The precision of the implementation under test, for :func:`tolerance` (set once per session
    by the suite's ``conftest``)."""

    def __init__(self) -> None:
        self.precision = Precision()

    @contextlib.contextmanager
    def use(self, precision: Precision) -> Iterator[Precision]:
        old, self.precision = self.precision, precision
        try:
            yield precision
        finally:
            self.precision = old


POLICY = _Policy()


class PrecisionDeclarationError(TypeError):
    """An adapter's ``precision()`` that does not declare a :class:`Precision` the suite can use: it
    raised (a dtype that is not named as torch names it, ``Precision(computes={"float64": "fp32"})``)
    or returned something else. The message names the adapter's method."""


def declared_precision(impl: Any) -> Precision:
    """``impl.precision()``, checked: a :class:`Precision` whose dtypes are torch dtype names.

    Raises :class:`PrecisionDeclarationError` naming ``<adapter class>.precision()`` otherwise
    (the numerics contract asks at collection, so a bad declaration is a collection error)."""
    where = f"{type(impl).__module__}.{type(impl).__qualname__}.precision()"
    try:
        declared = impl.precision()
    except (ValueError, TypeError, KeyError) as exc:
        raise PrecisionDeclarationError(f"the adapter's {where} raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(declared, Precision):
        raise PrecisionDeclarationError(
            f"the adapter's {where} returned {type(declared).__name__} {declared!r:.100}; expected a "
            "conformance.harness.precision.Precision (docs/adapter.md, 'Precision')")
    for caller, computed in declared.computes.items():
        for name in (caller, ALIASES.get(computed, computed)):
            if not isinstance(getattr(torch, str(name), None), torch.dtype):
                raise PrecisionDeclarationError(f"the adapter's {where} declares {caller!r} computed as "
                                                f"{computed!r}: {name!r} is not the name of a torch dtype")
    return declared


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for results of ``dtype`` under the declared precision; integers and bools: exact."""
    return TOLERANCES.get(POLICY.precision.computed_as(dtype), (0.0, 0.0))


def _fits(actual: torch.Tensor, expected: torch.Tensor, bounds: tuple[float, float]) -> bool:
    rtol, atol = bounds
    return bool(torch.allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True))


def assert_close(actual, expected, *, what: str = "output") -> None:
    """Compare tensors (or nested lists/tuples of them) with the tolerance the declared precision
    implies. A miss that a narrower dtype's bounds would cover fails as an undeclared loss of
    precision, naming the dtype the results match."""
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
    declared = POLICY.precision.computed_as(expected.dtype)
    if dtype_name(expected.dtype) in LADDER and not _fits(actual, expected, (rtol, atol)):
        for narrower in LADDER[LADDER.index(declared) + 1:]:
            if _fits(actual, expected, TOLERANCES[narrower]):
                raise AssertionError(
                    f"{what}: undeclared loss of precision: {expected.dtype} results match eager only within "
                    f"{narrower}'s bounds (rtol={TOLERANCES[narrower][0]}, atol={TOLERANCES[narrower][1]}), not "
                    f"{declared}'s (rtol={rtol}, atol={atol}); the implementation declares "
                    f"{POLICY.precision.describe()}. Declare what it computes in (Implementation.precision())."
                )
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")
