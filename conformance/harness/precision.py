"""The precision an implementation declares it computes in (``Implementation.precision()``).

Kept apart from :mod:`conformance.harness.tolerances` (which needs torch) so that the adapter protocol
imports nothing heavy: dtypes are named as strings (``"float64"``, ``"float32"``, ...).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

#: The float dtypes from the most to the least precise.
LADDER = ("float64", "float32", "float16", "bfloat16")
#: Other names a declaration may use, and the rung whose bounds they are held to: TF32 has a
#: 10-bit mantissa, like float16.
ALIASES = {"tf32": "float16"}


def dtype_name(dtype: Any) -> str:
    """``torch.float64`` -> ``"float64"`` (a name is returned as it is)."""
    return str(dtype).removeprefix("torch.")


@dataclasses.dataclass(frozen=True)
class Precision:
    """The precision an implementation computes in, as it declares it.

    ``computes``: caller dtype name -> the dtype it is computed in, for each dtype computed in a
    narrower one (``{"float64": "float32"}``: float64 narrowed to float32 and widened back);
    ``"tf32"`` is accepted for float32 matmuls in TF32, ``"bfloat16"`` for float32 under bfloat16
    autocast. Every dtype not named is computed in itself. ``note``: one line on why.
    """

    computes: Mapping[str, str] = dataclasses.field(default_factory=dict)
    note: str = ""

    def __post_init__(self) -> None:
        for caller, computed in self.computes.items():
            if caller not in LADDER:
                raise ValueError(f"Precision.computes: {caller!r} is not the name of a torch float dtype; "
                                 f"expected one of {LADDER}")
            rung = ALIASES.get(computed, computed)
            if rung not in LADDER:
                raise ValueError(f"Precision.computes[{caller!r}]: {computed!r} is not the name of a torch float dtype; "
                                 f"expected one of {LADDER + tuple(ALIASES)}")
            if LADDER.index(rung) < LADDER.index(caller):
                raise ValueError(f"Precision.computes[{caller!r}]: {computed!r} is wider than {caller!r}")

    def computed_as(self, dtype: Any) -> str:
        """The name of the dtype whose bounds results of ``dtype`` are held to."""
        name = dtype_name(dtype)
        computed = self.computes.get(name, name)
        return ALIASES.get(computed, computed)

    def describe(self) -> str:
        """``float64 computed as float32; every other dtype as itself (why)``, for the reports."""
        if not self.computes:
            text = "every float dtype computed as itself"
        else:
            text = "; ".join(f"{k} computed as {v}" for k, v in sorted(self.computes.items()))
            text += "; every other dtype as itself"
        return text + (f" ({self.note})" if self.note else "")
