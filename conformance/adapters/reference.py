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
    def fx_pass_names(self) -> list[str]:
        from reference.fx_passes import get_default_pass_manager

        return get_default_pass_manager().pass_names()

    def fx_pass_identity(self, names: Sequence[str]) -> str:
        from reference.fx_passes import FXPassManager, get_default_pass_manager

        by_name = {p.name: p for p in get_default_pass_manager().passes}
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise ValueError(f"unknown FX passes {unknown}; known: {sorted(by_name)}")
        manager = FXPassManager()
        for n in names:
            manager.add_pass(by_name[n])
        return manager.uuid()

    def fx_passes_applied(self, model: Callable, args: Sequence[Any], options: Mapping[str, Any] | None = None) -> list[str]:
        import logging

        from reference.compile.backend import lower_graphs

        ran: list[str] = []

        class _Collect(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if isinstance(record.msg, str) and record.msg.startswith("FX pass %r") and record.args:
                    ran.append(str(record.args[0]))

        logger = logging.getLogger("reference.fx_passes")
        handler, level = _Collect(logging.DEBUG), logger.level
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        try:
            lower_graphs(model, tuple(args), options=options)
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
        return ran

    def fx_graph_after_passes(self, model: Callable, args: Sequence[Any]) -> list[str]:
        from reference.fx_passes import get_default_pass_manager

        texts: list[str] = []

        def backend(gm, example_inputs, **_):
            gm = get_default_pass_manager().run_passes(gm, graph_name=f"graph_{len(texts)}", target_device="cpu")
            texts.append(gm.code.strip() + "\n")
            return gm.forward

        torch._dynamo.reset()
        try:
            torch.compile(model, backend=backend, dynamic=False)(*args)
        finally:
            torch._dynamo.reset()
        return texts

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
