"""The adapter for this project's reference implementation (the default ``--impl``)."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import torch

from conformance.implementation import Implementation


class ReferenceImplementation(Implementation):
    name = "reference"

    def versions(self) -> dict[str, str]:
        from reference.cache.key import tool_versions

        return dict(tool_versions())

    def backend_names(self) -> dict[str, str]:
        return {"compile": "neuron"}

    def compile(
        self,
        model: Callable,
        *,
        options: Mapping[str, Any] | None = None,
        fullgraph: bool = False,
        dynamic: bool | None = False,
        mode: str | None = None,
    ) -> Callable:
        return torch.compile(
            model, backend="neuron", options=dict(options) if options else None, fullgraph=fullgraph, dynamic=dynamic, mode=mode
        )

    def lower(self, model: Callable, args: Sequence[Any]) -> list[str]:
        from reference.compile.backend import lower_graphs

        return [g.hlo for g in lower_graphs(model, tuple(args))]

    # --- FX passes (issue 3) -------------------------------------------------------------------
    # (adapter methods for the FX pass contract go here)

    # --- backend contract: parameters, graph breaks, variables, metrics (issue 4) ---------------
    # (adapter methods for the backend contract go here)

    # --- compile caches (issue 5) -----------------------------------------------------------------
    # (adapter methods for the cache contract go here)

    # --- per-graph compiler arguments and the compile flows (issue 6) ---------------------------
    # (adapter methods for the compiler-argument contract go here)

    # --- SPMD (issue 7) ---------------------------------------------------------------------------
    def spmd_rank_tensor(self, rank: int):
        from reference.spmd import rank_tensor

        return rank_tensor(rank)

    def spmd_process_group(self, replica_groups):
        from reference.spmd import NeuronGroupCoordinator

        return NeuronGroupCoordinator(replica_groups).group

    def spmd_lower(self, model, args, kwargs=None):
        from reference.spmd.program import lower_texts

        return lower_texts(model, tuple(args), dict(kwargs or {}))

    def spmd_compile_stats(self):
        from reference.compile.metrics import METRICS

        return {
            "graphs": {m.graph_name: m.graph_id for m in METRICS.records()},
            "compiler_invocations": METRICS.counters().get("compiler_invocations", 0),
        }

    def check_single_artifact(self, staged, *, strict=None):
        from reference.spmd.guards import check_single_artifact

        return check_single_artifact(staged, strict=strict)

    def spmd_violation_errors(self):
        from reference.spmd.errors import SPMDViolationError

        return (SPMDViolationError,)


def make() -> ReferenceImplementation:
    return ReferenceImplementation()
