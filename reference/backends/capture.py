"""The capture seam: ``torch.compile(model, backend="neuron_libtorch_graph_capture")``.

It resolves the options exactly like the in-process seam (scope first, then the platform
arguments), runs the FX passes, and takes every graph through the pipeline's lower and key steps
(:mod:`reference.pipeline`; a graph with collectives is lowered as its SPMD program), and then
stops: instead of compiling, it stages the graph in the capture directory
(:mod:`reference.cache.staging`: ``<dir>/<key>/graph.hlo``, ``metadata.json`` with the resolved
``compiler_args`` and, for a program, its meshes, and ``program.json``). ``parallel_compile`` builds the staged graphs later, many at once, and publishes
them into the NEFF cache under that key, so a later in-process compile with the same arguments is a
cache hit. The graph itself runs eagerly, so the traced model still returns real outputs.

The capture directory is the one opened with :func:`capture_to` (``parallel_trace`` opens it in
each child), else ``<TORCH_NEURONX_HLO_CACHE_DIR>/captured``.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
from typing import Any, Callable, Iterator, Mapping

import torch
import torch.distributed as dist

from reference.backends.compile_entry import compile_fx_graph, opt_into_graph_breaks
from reference.backends.seam import Seam
from reference.compiler.request import CompileRequest, key_policy_named
from reference.cache.staging import StagedGraph, read_staged
from reference.core.build_settings import CacheRoots
from reference.core.errors import FlowDirectoryError
from reference.core.specs import LoweredGraph
from reference.pipeline import DEFAULT_KEY, BuildContext, KeyPolicy, Lowering, lower, stage
from reference.spmd.guards import mark_staged_rank

__all__ = ["CAPTURES", "CAPTURE_SEAM", "StagedGraph", "capture_backend", "capture_dir", "capture_to", "read_staged", "stage_graph"]

_capture_dir: contextvars.ContextVar[str | None] = contextvars.ContextVar("neuron_capture_dir", default=None)
_key_policy: contextvars.ContextVar[KeyPolicy] = contextvars.ContextVar("neuron_capture_key_policy", default=DEFAULT_KEY)


@contextlib.contextmanager
def capture_to(path: str | os.PathLike, *, key_policy: str = "default") -> Iterator[str]:
    """Stage the graphs captured in this block under ``path``, keyed for the seam that will serve
    them: ``key_policy="native"`` for ``neuron_native_lite`` (structure and shapes only)."""
    policy = key_policy_named(key_policy)  # BackendOptionError (a ValueError) for an unknown name
    folder = os.path.abspath(os.fspath(path))
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise FlowDirectoryError("capture_to: the staging directory", folder, "is not a directory",
                                 "give a directory (it is created when missing)")
    token = _capture_dir.set(folder)
    policy_token = _key_policy.set(policy)
    try:
        yield _capture_dir.get()
    finally:
        _key_policy.reset(policy_token)
        _capture_dir.reset(token)


def capture_dir(cache: CacheRoots) -> str:
    """Where captured graphs are staged: the :func:`capture_to` block's folder, else ``captured/``
    under the HLO cache folder of ``cache`` (a compile request's roots)."""
    return _capture_dir.get() or os.path.join(cache.folder("hlo"), "captured")


class CaptureLog:
    """The entries this process staged, in order (``parallel_trace`` reports them per job)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[dict[str, Any]] = []

    def add(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._entries.append(entry)

    def entries(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


CAPTURES = CaptureLog()


def stage_graph(lowering: Lowering | LoweredGraph, ctx: BuildContext, *, directory: str | None = None) -> StagedGraph:
    """Stage one lowered graph under ``ctx`` (its name, compiler configuration and key policy;
    atomically: a reader sees no entry or a whole one), mark the rank that staged it in a
    multi-rank run (for the single-artifact check), and log it. The graph goes under
    ``directory``, else the :func:`capture_to` block's folder, else ``captured/`` of the HLO cache
    folder of the context's settings."""
    if isinstance(lowering, LoweredGraph):
        lowering = Lowering(lowering)
    directory = os.path.abspath(directory or capture_dir(ctx.settings.cache))
    staged = stage(lowering, ctx, directory)
    if dist.is_available() and dist.is_initialized():
        mark_staged_rank(staged.path, dist.get_rank())
    CAPTURES.add({"key": staged.key, "graph_name": ctx.graph_name, "compiler_args": list(ctx.config.args), "directory": directory})
    return staged


def _stage_action(aten_gm: torch.fx.GraphModule, *, graph_name: str, request: CompileRequest, **_) -> Callable:
    # the request's key policy is the capture_to block's (the seam's key_policy_from)
    stage_graph(lower(aten_gm, graph_name=graph_name, settings=request.settings), BuildContext.of(request, graph_name))
    return aten_gm


#: ``backend="neuron_libtorch_graph_capture"``: lower, key and stage every graph, run it eagerly. It
#: takes the forced graph breaks (an op the neuron seam would not compile is not staged for it).
#: No inference plans: nothing is served.
CAPTURE_SEAM = Seam(
    "neuron_libtorch_graph_capture", "stage", _stage_action, key_policy=DEFAULT_KEY, graph_breaks=True, plans=False,
    no_plans_because="it stages graphs for parallel_compile and serves none", key_policy_from=_key_policy.get,
)


@opt_into_graph_breaks
def capture_backend(gm: torch.fx.GraphModule, example_inputs: list, options: Mapping[str, Any] | None = None, mode: str | None = None):
    """``backend="neuron_libtorch_graph_capture"``: lower and stage every graph; run it eagerly."""
    return compile_fx_graph(gm, example_inputs, options, seam=CAPTURE_SEAM)
