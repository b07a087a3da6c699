"""Errors of the SPMD layer; all are :class:`~reference.core.errors.NeuronBackendError`."""

from __future__ import annotations

from typing import Sequence

from reference.core.errors import NeuronBackendError


class MeshError(NeuronBackendError):
    """A process group or replica-group partition the mesh registry cannot use."""


class SPMDViolationError(NeuronBackendError):
    """A guard rail found per-rank divergence under ``NEURON_LIBTORCH_SPMD_STRICT=1``."""


class RankConstantError(SPMDViolationError):
    """A small integer constant tensor built while a runtime ``rank`` input is in the graph."""

    def __init__(self, message: str, *, graph_name: str, findings: Sequence[object]) -> None:
        super().__init__(message)
        self.graph_name = graph_name
        self.findings = list(findings)


class SplinterError(SPMDViolationError):
    """A distinct graph compiled into several per-rank artifacts instead of one for the world."""

    def __init__(self, message: str, *, splinters: Sequence[object]) -> None:
        super().__init__(message)
        self.splinters = list(splinters)
