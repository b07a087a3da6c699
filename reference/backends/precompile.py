"""PyTorch's precompile cache (``TORCH_CACHING_PRECOMPILE``) for the neuron backend.

With ``torch._dynamo.config.caching_precompile`` on (PyTorch sets it from ``TORCH_CACHING_PRECOMPILE``
at import), Dynamo packages each compiled frame (bytecode and guards) and asks every backend for a
serializable artifact under the graph's backend id. ``torch.compiler.save_cache_artifacts()`` then
returns one blob; ``torch.compiler.load_cache_artifacts(blob)`` in a fresh process installs the
frames so Dynamo does not trace again.

The neuron backend's artifact is the Dynamo graph module (its nodes, :func:`graph_to_bytes`), the
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


def graph_to_bytes(gm: torch.fx.GraphModule) -> bytes:
    """The graph module as bytes that come back as the same graph (:func:`graph_from_bytes`).

    Pickling a ``GraphModule`` keeps its code and traces that code again on load, which is not the
    same graph: a call with no graph input (``torch.arange(n)``) runs at that trace and comes back
    as a constant buffer, which AOT Autograd then lifts to an input, so the rebuilt graph lowers
    to other StableHLO, gets another key and is compiled again. Here the nodes themselves travel
    (their targets by reference, their metadata left behind) with the attributes and submodules
    the nodes name."""
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    for node in graph.nodes:
        node.meta = {}
    names = {str(n.target).split(".")[0] for n in graph.nodes if n.op in ("get_attr", "call_module")}
    attrs = {name: getattr(gm, name) for name in names}
    return pickle.dumps((graph, attrs))


def graph_from_bytes(blob: bytes) -> torch.fx.GraphModule:
    graph, attrs = pickle.loads(blob)
    root = torch.nn.Module()
    for name, value in attrs.items():
        if isinstance(value, torch.nn.Module):
            root.add_module(name, value)
        else:
            setattr(root, name, value)
    return torch.fx.GraphModule(root, graph)


@dataclass
class _Payload:
    graph: bytes  # a pickled GraphModule: the fallback when the nodes do not pickle (and older artifacts)
    specs: list[tuple]  # (dtype, shape, stride[, requires_grad]) per example input
    options: dict[str, Any]
    rebuild: Callable[..., Any]  # the seam's rebuild function (pickled by its qualified name)
    graph_digest: str | None = None  # the graph as Dynamo made it (the inference plan's key reads it)
    graph_nodes: bytes | None = None  # graph_to_bytes: the graph as it was, nodes and all


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name.removeprefix("torch."))


class LazyNeuronCallable:
    """The compiled callable rebuilt from a precompile artifact on its first call."""

    def __init__(self, payload: _Payload) -> None:
        self._payload = payload
        self._compiled = None
        self._lock = threading.Lock()

    def _build(self):
        nodes = getattr(self._payload, "graph_nodes", None)  # absent from artifacts saved before it was kept
        gm = graph_from_bytes(nodes) if nodes else pickle.loads(self._payload.graph)
        example = [
            torch.empty_strided(spec[1], spec[2], dtype=_dtype(spec[0])).requires_grad_(bool(spec[3]) if len(spec) > 3 else False)
            for spec in self._payload.specs
        ]  # requires_grad as the first compile saw it: the inference plan's key reads it
        digest = getattr(self._payload, "graph_digest", None)  # absent from artifacts saved before it was kept
        extra = {"graph_digest": digest} if digest else {}
        return self._payload.rebuild(gm, example, self._payload.options, **extra)

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

    ``rebuild(gm, example_inputs, options, graph_digest=)`` compiles the graph again, through its
    seam, when the artifact is loaded: a module-level function, pickled by name."""
    backend_id = gm.meta.get("backend_id") if hasattr(gm, "meta") else None
    if not backend_id:
        return False
    try:
        specs = []
        for t in example_inputs:
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"a {type(t).__name__} input")
            specs.append((str(t.dtype), tuple(int(s) for s in t.shape), tuple(int(s) for s in t.stride()), bool(t.requires_grad)))
        try:
            nodes, graph = graph_to_bytes(gm), b""
        except Exception as exc:  # noqa: BLE001 - a target that does not pickle: the code-only form
            log.debug("graph %s travels as code (its nodes do not pickle: %s)", backend_id, exc)
            nodes, graph = None, pickle.dumps(gm)
        payload = _Payload(graph, specs, dict(options or {}), rebuild, graph_digest, nodes)
        content = pickle.dumps(payload)
    except Exception as exc:  # an unpicklable graph only loses the precompile shortcut
        log.warning("graph %s is not saved to the precompile cache: %s", backend_id, exc)
        return False
    PrecompileContext.record_artifact(NeuronPrecompileArtifact(backend_id, content))
    return True
