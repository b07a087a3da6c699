"""Data shared by every floor: the description of one tensor, and one graph as lowered text."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

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

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "TensorSpec":
        """The inverse of :meth:`as_json` (the one reader of specs stored in metadata and records)."""
        return cls(str(d["dtype"]), tuple(int(s) for s in d["shape"]), tuple(int(s) for s in d.get("stride", ())))


@dataclass(frozen=True)
class LoweredGraph:
    """One graph as lowered text: the text is what the key hashes; the specs are its I/O."""

    hlo: str
    input_specs: tuple[TensorSpec, ...]
    output_specs: tuple[TensorSpec, ...]
    node_count: int
    #: ``(line of hlo, the FX node it came from)`` for the lines whose origin is known, so that a
    #: compiler error at ``<stdin>:LINE`` can name the ATen op (empty when served from the HLO cache).
    origins: tuple[tuple[int, str], ...] = field(default=(), compare=False)

    def origin_of_line(self, line: int) -> str | None:
        """The ATen op (with its node and source line) that the HLO text's ``line`` came from."""
        return dict(self.origins).get(line)


def with_none_outputs(outputs: Sequence, nones: Sequence[int]) -> list:
    """``outputs`` (a lowered module's tensors) with ``None`` put back at ``nones``."""
    merged = list(outputs)
    for i in nones:  # ascending, so each position is final when it is filled
        merged.insert(i, None)
    return merged
