"""Adapters for backends that ship with PyTorch: ``inductor`` and ``aot_eager``.

They let the suite run its backend probes against real implementations that no one here wrote, so
the support matrix of the reference can be read beside theirs::

    pytest conformance/test_backend_support.py --impl conformance.adapters.torch_builtin:inductor
    pytest conformance/test_backend_support.py --impl conformance.adapters.torch_builtin:aot_eager

Compiled graphs are counted with Dynamo's own counter (``unique_graphs``), which every backend
shares. The Neuron-specific capabilities (forced graph breaks, the ``TORCH_NEURONX_*`` variables,
the helper API, the debug directory) are not provided, so their probes are reported as
Unsupported with the reason below.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import torch

from conformance.implementation import Implementation, NotSupported


class TorchBuiltinImplementation(Implementation):
    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.name = backend
        self._base = 0

    def versions(self) -> dict[str, str]:
        return {"torch": torch.__version__}

    def backend_names(self) -> dict[str, str]:
        return {"compile": self.backend}

    def compile(
        self,
        model: Callable,
        *,
        options: Mapping[str, Any] | None = None,
        fullgraph: bool = False,
        dynamic: bool | None = False,
        mode: str | None = None,
    ) -> Callable:
        kwargs: dict[str, Any] = {"fullgraph": fullgraph, "dynamic": dynamic}
        if options:
            kwargs["options"] = dict(options)
        if mode:
            kwargs["mode"] = mode
        return torch.compile(model, backend=self.backend, **kwargs)

    def lower(self, model: Callable, args: Sequence[Any]) -> list[str]:
        raise NotSupported(f"{self.backend} does not lower to StableHLO")

    # --- backend contract (issue 4) ---------------------------------------------------------------
    def torch_compile(self, model: Callable, **kwargs: Any) -> Callable:
        return torch.compile(model, backend=self.backend, **kwargs)

    @staticmethod
    def _unique_graphs() -> int:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])

    def reset_graph_count(self) -> None:
        self._base = self._unique_graphs()

    def graph_count(self) -> int:
        return self._unique_graphs() - self._base

    def forced_graph_breaks(self) -> Mapping[str, Any]:
        raise NotSupported(f"{self.backend} forces no graph breaks of its own")

    def environment_variables(self) -> Mapping[str, Any]:
        raise NotSupported(f"{self.backend} reads none of the backend's TORCH_NEURONX_*/NEURON_* variables")

    def helper_api(self) -> Any:
        raise NotSupported(f"{self.backend} has no neuron_dynamo_backend helper API")

    def debug_artifact_globs(self) -> Mapping[str, str]:
        raise NotSupported(f"{self.backend} writes no artifacts to TORCH_NEURONX_DEBUG_DIR")


def inductor() -> TorchBuiltinImplementation:
    return TorchBuiltinImplementation("inductor")


def aot_eager() -> TorchBuiltinImplementation:
    return TorchBuiltinImplementation("aot_eager")
