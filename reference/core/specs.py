"""The description of one tensor that the cache key, the metadata and the runtime share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class TensorSpec:
    """What the cache key and the runtime need to know of one tensor."""

    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]

    @classmethod
    def of(cls, t: torch.Tensor) -> "TensorSpec":
        return cls(str(t.dtype).replace("torch.", ""), tuple(int(s) for s in t.shape), tuple(int(s) for s in t.stride()))

    def as_json(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "shape": list(self.shape), "stride": list(self.stride)}
