"""The runtime: loads a compiled artifact with the IREE runtime and runs it on the CPU.

Buffers: an input tensor is handed to IREE as a NumPy view of its memory (no copy on the torch
side); IREE's Python binding then copies it once into a device buffer, since it has no import
path for host memory (no DLPack). Outputs come back as device arrays whose host mapping is
wrapped by ``torch.from_numpy``, so the result tensors share the runtime's buffers (no copy).
bfloat16 crosses as ``ml_dtypes.bfloat16`` and is reinterpreted bit for bit.
"""

from __future__ import annotations

import atexit
import threading
import weakref
from typing import Sequence

import numpy as np
import torch

from reference.core.errors import NEFFExecutionError
from reference.core.specs import TensorSpec

_DRIVER = "local-task"


class _Runtime:
    """One IREE instance and device per process, created on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._config = None

    def config(self):
        with self._lock:
            if self._config is None:
                import iree.runtime as ireert

                self._config = ireert.Config(_DRIVER)
            return self._config

    def drop(self) -> None:
        self._config = None


_RUNTIME = _Runtime()
_LOADED: "weakref.WeakSet[LoadedArtifact]" = weakref.WeakSet()


def _torch_to_host_array(t: torch.Tensor) -> np.ndarray:
    if t.device.type != "cpu":
        t = t.cpu()
    if not t.is_contiguous():
        t = t.contiguous()
    if t.dtype == torch.float64:
        # The compiler narrows f64 to f32 (the device has no f64 units, like Neuron's); the
        # module's signature is f32, and outputs are widened back to the graph's f64.
        t = t.to(torch.float32)
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.uint16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _host_array_to_torch(a: np.ndarray, spec: TensorSpec | None) -> torch.Tensor:
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)
    if not a.flags.writeable:
        a = a.copy()
    t = torch.from_numpy(a)
    if spec is not None and spec.dtype == "bool" and t.dtype != torch.bool:
        t = t.to(torch.bool)
    if spec is not None and spec.dtype == "float64" and t.dtype != torch.float64:
        t = t.to(torch.float64)
    return t


class LoadedArtifact:
    """A compiled artifact loaded into the runtime; call it with tensors, get a list of tensors."""

    def __init__(
        self,
        artifact: bytes,
        *,
        graph_name: str,
        input_specs: Sequence[TensorSpec] = (),
        output_specs: Sequence[TensorSpec] = (),
    ) -> None:
        import iree.runtime as ireert

        self.graph_name = graph_name
        self.input_specs = tuple(input_specs)
        self.output_specs = tuple(output_specs)
        try:
            config = _RUNTIME.config()
            self._ctx = ireert.SystemContext(config=config)
            self._module = ireert.VmModule.copy_buffer(self._ctx.instance, artifact)
            self._ctx.add_vm_module(self._module)
            self._fn = self._ctx.modules.module["main"]
        except Exception as exc:
            raise NEFFExecutionError(f"the runtime could not load the artifact: {exc}", graph_name=graph_name) from exc
        _LOADED.add(self)

    def __call__(self, *args: torch.Tensor) -> list[torch.Tensor]:
        if self.input_specs and len(args) != len(self.input_specs):
            raise NEFFExecutionError(
                f"expected {len(self.input_specs)} inputs, got {len(args)}", graph_name=self.graph_name
            )
        host = []
        for i, a in enumerate(args):
            if not isinstance(a, torch.Tensor):
                raise NEFFExecutionError(f"input {i} is a {type(a).__name__}, not a tensor", graph_name=self.graph_name)
            host.append(_torch_to_host_array(a.detach()))
        try:
            result = self._fn(*host)
        except Exception as exc:
            raise NEFFExecutionError(f"execution failed: {exc}", graph_name=self.graph_name) from exc
        if result is None:
            return []
        if not isinstance(result, (tuple, list)):
            result = (result,)
        outs = []
        for i, r in enumerate(result):
            spec = self.output_specs[i] if i < len(self.output_specs) else None
            arr = r.to_host() if hasattr(r, "to_host") else np.asarray(r)
            outs.append(_host_array_to_torch(arr, spec))
        return outs

    def close(self) -> None:
        self._fn = None
        self._module = None
        self._ctx = None


def load(artifact: bytes, **kwargs) -> LoadedArtifact:
    return LoadedArtifact(artifact, **kwargs)


@atexit.register
def _release() -> None:
    # Drop runtime objects before interpreter shutdown so the binding does not report them.
    for loaded in list(_LOADED):
        loaded.close()
    _LOADED.clear()
    _RUNTIME.drop()
    import gc

    gc.collect()
