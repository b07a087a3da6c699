"""Adapter for IREE-Turbine's ``turbine_cpu`` ``torch.compile`` backend (``pip install '.[turbine]'``).

A backend written outside this project that, like the reference, compiles Dynamo graphs with IREE
for the CPU. It is registered through the ``torch_dynamo_backends`` entry point of ``iree-turbine``,
so ``torch.compile(model, backend="turbine_cpu")`` finds it without an import::

    pytest conformance --conformance-impl conformance.adapters.turbine:turbine_cpu -n 2

What the backend does, as read from its source: Dynamo hands the graph to AOT Autograd, whose
forward graph is decomposed (Turbine's own decomposition list), imported into the ``torch`` MLIR
dialect with IREE's FX importer, compiled in-process by the IREE compiler for ``llvm-cpu`` and run
through the IREE runtime. Nothing is written to disk and no state outlives the process.

So this adapter provides compiling (through ``torch.compile`` only, graphs counted with Dynamo's
own counter like the other PyTorch-side adapters) and nothing else; every capability that the
backend does not have raises :class:`NotSupported` with the reason.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any, Mapping

from conformance.adapters.torch_builtin import BuiltinBackend, TorchBuiltinImplementation
from conformance.harness.implementation import NotSupported

BACKEND = "turbine_cpu"
_DISTRIBUTIONS = ("iree-turbine", "iree-base-compiler", "iree-base-runtime")


def turbine_available() -> str | None:
    """``None`` when the backend can be used here, else why not (the extra is not installed)."""
    try:
        metadata.version("iree-turbine")
    except metadata.PackageNotFoundError:
        return "iree-turbine is not installed (install the project's 'turbine' extra)"
    return None


class TurbineBackend(BuiltinBackend):
    def forced_graph_breaks(self) -> Mapping[str, Any]:
        raise NotSupported(f"{BACKEND} forces no graph breaks of its own: an op it cannot compile fails the compile")

    # The variables and the helper API are missing as they are for torch's own backends (inherited).

    def debug_artifact_globs(self) -> Mapping[str, str]:
        raise NotSupported(f"{BACKEND} compiles in memory and writes no artifacts to TORCH_NEURONX_DEBUG_DIR")


class TurbineImplementation(TorchBuiltinImplementation):
    backend_capability = TurbineBackend

    def __init__(self) -> None:
        missing = turbine_available()
        if missing:
            raise RuntimeError(f"{BACKEND}: {missing}")
        super().__init__(BACKEND)

    def versions(self) -> dict[str, str]:
        found = super().versions()
        for dist in _DISTRIBUTIONS:
            found[dist] = metadata.version(dist)
        return found

    def lower(self, model, args):
        raise NotSupported(
            f"{BACKEND} imports FX graphs into the torch MLIR dialect and leaves the conversion to IREE's "
            "input pipeline; it never produces StableHLO text"
        )


def turbine_cpu() -> TurbineImplementation:
    return TurbineImplementation()
