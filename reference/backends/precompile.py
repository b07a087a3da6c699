"""PyTorch's precompile cache (``TORCH_CACHING_PRECOMPILE``) for the neuron backend.

With ``torch._dynamo.config.caching_precompile`` on (PyTorch sets it from ``TORCH_CACHING_PRECOMPILE``
at import), Dynamo packages each compiled frame (bytecode and guards) and asks every backend for a
serializable artifact under the graph's backend id. ``torch.compiler.save_cache_artifacts()`` then
returns one blob; ``torch.compiler.load_cache_artifacts(blob)`` in a fresh process installs the
frames so Dynamo does not trace again.

The neuron backend's artifact is the Dynamo graph module (pickled as code plus attributes), the
input specs and the backend options: everything needed to rebuild the compiled callable. On load
it is rebuilt lazily on the first call through the ordinary pipeline, which finds its inference plan
(``reference.backends.inference_plan``), its lowering in the HLO cache and its binary in the NEFF
cache, so a warm process skips Dynamo tracing, AOT Autograd's trace, lowering and compiling (a graph
without a plan is traced by AOT Autograd again).
"""

from __future__ import annotations

import logging
import pickle
import threading
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch

from reference.core.torch_compat import BackendCacheArtifact, PrecompileContext, dynamo_config

log = logging.getLogger(__name__)


def enabled() -> bool:
    return bool(getattr(dynamo_config(), "caching_precompile", False))


@dataclass
class _Payload:
    graph: bytes  # pickled GraphModule
    specs: list[tuple]  # (dtype, shape, stride[, requires_grad]) per example input
    options: dict[str, Any]
    rebuild: Callable[..., Any]  # the seam's compile function (pickled by its qualified name)
    graph_digest: str | None = None  # the graph as Dynamo made it (the inference plan's key reads it)


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name.removeprefix("torch."))


class LazyNeuronCallable:
    """The compiled callable rebuilt from a precompile artifact on its first call."""

    def __init__(self, payload: _Payload) -> None:
        self._payload = payload
        self._compiled = None
        self._lock = threading.Lock()

    def _build(self):
        gm = pickle.loads(self._payload.graph)
        example = [
            torch.empty_strided(spec[1], spec[2], dtype=_dtype(spec[0])).requires_grad_(bool(spec[3]) if len(spec) > 3 else False)
            for spec in self._payload.specs
        ]  # requires_grad as the first compile saw it: the inference plan's key reads it
        digest = getattr(self._payload, "graph_digest", None)  # absent from artifacts saved before it was kept
        extra = {"graph_digest": digest} if digest else {}
        return self._payload.rebuild(gm, example, self._payload.options, seam="neuron_libtorch", **extra)

    def __call__(self, *args):
        if self._compiled is None:
            with self._lock:
                if self._compiled is None:
                    self._compiled = self._build()
        return self._compiled(*args)


class NeuronPrecompileArtifact(BackendCacheArtifact):
    """The neuron backend's entry in PyTorch's precompile cache (picklable: module level)."""

    def __init__(self, key: str, content: bytes) -> None:
        self.key = key
        self.content = content

    def after_deserialization(self):
        return LazyNeuronCallable(pickle.loads(self.content))


def record(
    gm: torch.fx.GraphModule, example_inputs: list, options: Mapping[str, Any] | None, rebuild: Callable[..., Any],
    *, graph_digest: str | None = None,
) -> bool:
    """Record the graph for PyTorch's precompile cache; False when it cannot be (a warning is logged).

    ``rebuild(gm, example_inputs, options, seam=)`` compiles the graph again when the artifact is
    loaded: a module-level function, pickled by name."""
    backend_id = gm.meta.get("backend_id") if hasattr(gm, "meta") else None
    if not backend_id:
        return False
    try:
        specs = []
        for t in example_inputs:
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"a {type(t).__name__} input")
            specs.append((str(t.dtype), tuple(int(s) for s in t.shape), tuple(int(s) for s in t.stride()), bool(t.requires_grad)))
        payload = _Payload(pickle.dumps(gm), specs, dict(options or {}), rebuild, graph_digest)
        content = pickle.dumps(payload)
    except Exception as exc:  # an unpicklable graph only loses the precompile shortcut
        log.warning("graph %s is not saved to the precompile cache: %s", backend_id, exc)
        return False
    PrecompileContext.record_artifact(NeuronPrecompileArtifact(backend_id, content))
    return True
