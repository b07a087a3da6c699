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
    def torch_compile(self, model: Callable, **kwargs: Any) -> Callable:
        return torch.compile(model, backend="neuron", **kwargs)

    def reset_graph_count(self) -> None:
        from reference import reset_dynamo_metrics

        reset_dynamo_metrics()

    def graph_count(self) -> int:
        from reference import get_dynamo_metrics

        return len(get_dynamo_metrics())

    def forced_graph_breaks(self) -> Mapping[str, Any]:
        from reference.compile import graph_breaks

        return {
            "gb_type": graph_breaks.GB_TYPE,
            "sort": graph_breaks.THRESHOLDS.get("sort"),
            "topk": graph_breaks.THRESHOLDS.get("topk"),
            "no_lowering": dict(graph_breaks.no_lowering_ops()),
        }

    def environment_variables(self) -> Mapping[str, Any]:
        from reference.compile import env

        return {name: env.default(name) for name in env.declared()}

    def helper_api(self) -> Any:
        import reference

        return reference

    def debug_artifact_globs(self) -> Mapping[str, str]:
        return {"fx_graph": "*/fx_graph.py", "stablehlo": "*/stablehlo.mlir", "artifact": "*/artifact.vmfb"}

    def unsupported_compiler_apis(self) -> Mapping[str, str]:
        return {
            "cudagraph_mark_step_begin": "the reference runs no CUDA graphs, so there is no step to mark; "
            "the call does nothing for this backend",
        }

    # --- compile caches (issue 5) -----------------------------------------------------------------
    # (adapter methods for the cache contract go here)

    # --- per-graph compiler arguments and the compile flows (issue 6) ---------------------------
    # (adapter methods for the compiler-argument contract go here)

    # --- SPMD (issue 7) ---------------------------------------------------------------------------
    # (adapter methods for the SPMD contract go here)


def make() -> ReferenceImplementation:
    return ReferenceImplementation()
