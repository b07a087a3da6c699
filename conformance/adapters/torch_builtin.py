"""Adapters for backends that ship with PyTorch: ``inductor`` and ``aot_eager``.

They let the suite run its backend probes against real implementations that no one here wrote, so
the support matrix of the reference can be read beside theirs::

    pytest conformance/tests/test_backend_support.py --conformance-impl conformance.adapters.torch_builtin:inductor
    pytest conformance/tests/test_backend_support.py --conformance-impl conformance.adapters.torch_builtin:aot_eager

Compiled graphs are counted with Dynamo's own counter (``unique_graphs``), which every backend
shares. Execution evidence is what any backend allows to observe (``Implementation.evidence``):
the graphs Dynamo handed the backend and the runs of the callables it returned; these backends
report no fallbacks of their own. The Neuron-specific capabilities (forced graph breaks, the ``TORCH_NEURONX_*`` variables,
the helper API, the debug directory) are not provided, so their probes are reported as
Unsupported with the reason below. Each declares the support matrix it is expected to show (what
the probes observed with torch 2.13) and lists the contract tests it is known to fail, with the
reason, in ``conformance/expected/<backend>.txt``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from conformance.harness.capabilities import BackendCapability, HelperApi
from conformance.harness.implementation import Implementation, NotSupported

_PACKAGE = Path(__file__).resolve().parent.parent

_PARAMETERS = ["model", "fullgraph", "dynamic", "backend", "mode", "options", "name", "disable", "recompile_limit",
               "isolate_recompiles", "shapes_spec"]
_APIS = [
    "compile", "reset", "allow_in_graph", "substitute_in_graph", "assume_constant_result", "list_backends", "disable",
    "set_default_backend", "get_default_backend", "set_stance", "set_enable_guard_collectives",
    "cudagraph_mark_step_begin", "is_compiling", "is_dynamo_compiling", "is_exporting", "keep_portable_guards_unsafe",
    "skip_guard_on_inbuilt_nn_modules_unsafe", "skip_guard_on_all_nn_modules_unsafe", "keep_tensor_guards_unsafe",
    "skip_guard_on_globals_unsafe", "skip_all_guards_unsafe", "nested_compile_region", "load_cache_artifacts",
    "load_compiled_function", "save_cache_artifacts", "wrap_numpy",
]
_NEURON_ONLY = {
    "graph_breaks": ["torch.sort, torch.argsort", "torch.topk", "torch.nn.functional.grouped_mm, torch._grouped_mm",
                     "Operations with no lowering"],
    "variables": [
        "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "TORCH_NEURONX_DEBUG_DIR", "TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS",
        "TORCH_NEURONX_COMPILE_ONLY", "TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY", "TORCH_NEURONX_RETAIN_DEVICE_MODE",
        "NEURON_PLATFORM_TARGET_OVERRIDE", "NEURON_CC_FLAGS", "TORCH_NEURONX_ENABLE_NKI_SDPA",
        "TORCH_NEURONX_NEFF_CACHE_DIR", "TORCH_NEURONX_HLO_CACHE_DIR", "TORCH_NEURONX_NEFF_DISABLE_CACHE",
        "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR", "TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT", "TORCH_CACHING_PRECOMPILE",
        "TORCH_NEURONX_ENABLED_METRIC_TABLES", "TORCH_NEURONX_METRICS_DIR",
    ],
    "helper_api": ["set_model_name()", "get_model_name()", "get_rank()", "get_dynamo_metrics()",
                   "reset_dynamo_metrics()", "NEFFCompilationError", "NEFFExecutionError"],
}
# What differs from "Supported" among the generic rows, per backend: an unknown options key is
# only warned about by aot_eager (inductor rejects it), and neither propagates ``name``.
_DIFFERENCES = {
    "aot_eager": {("parameters", "options"): "Partial", ("parameters", "name"): "Partial"},
    "inductor": {("parameters", "name"): "Partial"},
}


class BuiltinBackend(BackendCapability):
    """The backend contract of one of torch's own backends: compiling through ``torch.compile``,
    graphs counted with Dynamo's ``unique_graphs``; the Neuron-specific members are absent."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self._base = 0

    def names(self) -> dict[str, str]:
        return {"compile": self.backend}

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

    def helper_api(self) -> HelperApi:
        raise NotSupported(f"{self.backend} has no neuron_dynamo_backend helper API")

    def debug_artifact_globs(self) -> Mapping[str, str]:
        raise NotSupported(f"{self.backend} writes no artifacts to TORCH_NEURONX_DEBUG_DIR")

    def expected_support(self) -> Mapping[str, Mapping[str, str]]:
        diff = _DIFFERENCES.get(self.backend, {})
        matrix = {
            "parameters": {p: diff.get(("parameters", p), "Supported") for p in _PARAMETERS},
            "apis": {a: diff.get(("apis", a), "Supported") for a in _APIS},
        }
        matrix.update({table: dict.fromkeys(rows, "Unsupported") for table, rows in _NEURON_ONLY.items()})
        return matrix


class TorchBuiltinImplementation(Implementation):
    #: the backend-contract type of this adapter (a subclass adapter may refine it)
    backend_capability: type[BuiltinBackend] = BuiltinBackend

    def __init__(self, backend: str) -> None:
        self.backend_name = backend
        self.name = backend
        self._backend = self.backend_capability(backend)

    def versions(self) -> dict[str, str]:
        return {"torch": torch.__version__}

    # --- reporting --------------------------------------------------------------------------------
    def expectations_file(self) -> str | None:
        path = _PACKAGE / "expected" / f"{self.backend_name}.txt"
        return str(path) if path.is_file() else None

    def snapshot_root(self) -> str | None:
        return str(_PACKAGE / "goldens")

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
        return torch.compile(model, backend=self.backend_name, **kwargs)

    def lower(self, model: Callable, args: Sequence[Any]) -> list[str]:
        raise NotSupported(f"{self.backend_name} does not lower to StableHLO")

    # --- the one capability group: the backend contract ----------------------------------------
    def backend(self) -> BuiltinBackend:
        return self._backend


def inductor() -> TorchBuiltinImplementation:
    return TorchBuiltinImplementation("inductor")


def aot_eager() -> TorchBuiltinImplementation:
    return TorchBuiltinImplementation("aot_eager")
