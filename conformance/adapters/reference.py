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
    # (adapter methods for the SPMD contract go here)


def make() -> ReferenceImplementation:
    return ReferenceImplementation()
