"""``parallel_trace(jobs)``: capture many graphs at once, each job in its own forked child.

A job is ``(model, kwargs, compiler_args)`` (or a :class:`TraceJob`): it carries the serialisable
part of its compile request (:class:`~reference.compiler.request.DeferredRequest`: the concrete
list and the key policy) into the child as JSON; the child opens
``scoped_compiler_args(compiler_args)`` and calls ``model(**kwargs)`` under the capture directory,
so the capture seam stages the job's graphs with the job's arguments. A two-element job ``(model, kwargs)`` (the native path, which
resolves its arguments in-process) runs with no scope. This module never calls model policy code:
it only reads the concrete list the runner put on the job.

``model`` should be compiled with the capture backend (``neuron_libtorch_graph_capture``); a plain
module or function is compiled with it here, with ``options``. Each child starts from a fresh
Dynamo, so a graph the parent already compiled is captured again, with the child's scope.

A child that raises, crashes or runs past ``timeout`` is reported with the job's identity (its
index, the model, its arguments) and its error; the parent never waits on it forever. A guard-rail
violation in a child (:class:`~reference.spmd.errors.SPMDViolationError`, under
``NEURON_LIBTORCH_SPMD_STRICT=1``) is not a failed job: once every job has ended, the parent raises
it as itself, ``from`` the child's traceback, whatever ``raise_on_error`` says.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from reference.backends.capture import CAPTURES, capture_backend, capture_dir, capture_to
from reference.compiler.request import DeferredRequest
from reference.compiler.scope import scoped_compiler_args
from reference.core.errors import BackendOptionError, FlowDirectoryError, NeuronBackendError
from reference.core.build_settings import CacheRoots
from reference.core.torch_compat import OptimizedModule
from reference.flows.forked import ChildOutcome, reraise, run_forked
from reference.spmd.errors import SPMDViolationError

DEFAULT_TIMEOUT_S = 1800.0


class TraceJobError(NeuronBackendError, ValueError):
    """A malformed trace job (wrong length, a model that is not callable, bad arguments)."""


class ParallelTraceError(NeuronBackendError):
    """One or more trace jobs failed; ``results`` holds every job's outcome."""

    def __init__(self, results: list["TraceResult"]) -> None:
        failed = [r for r in results if not r.ok]
        lines = [f"{len(failed)} of {len(results)} trace jobs failed:"] + [f"  {r.describe()}" for r in failed]
        super().__init__("\n".join(lines))
        self.results = results
        self.failures = failed


@dataclass
class TraceResult:
    index: int
    identity: str
    ok: bool
    captured: list[dict[str, Any]] = field(default_factory=list)
    error_type: str | None = None
    error: str | None = None
    traceback: str | None = None

    def describe(self) -> str:
        if self.ok:
            return f"{self.identity}: staged {len(self.captured)} graph(s)"
        return f"{self.identity}: {self.error_type or 'failed'}: {self.error}"


def _model_name(model: Any) -> str:
    inner = getattr(model, "_orig_mod", model)
    return getattr(inner, "__qualname__", None) or type(inner).__name__


@dataclass(frozen=True)
class TraceJob:
    """One trace job: ``model(**kwargs)`` in a forked child under ``request``, the serialisable
    part of its compile request (its concrete argument list, or ``None`` for no scope, and the key
    policy the graphs are staged under). ``scoped`` is False for a two-element job (the native
    path, which resolves its arguments in-process): no scope is opened at all."""

    model: Callable
    kwargs: Mapping[str, Any]
    request: DeferredRequest
    scoped: bool = True

    @classmethod
    def from_tuple(cls, job: Sequence[Any], index: int, key_policy: str = "default") -> "TraceJob":
        """A job from the seeds' tuple form ``(model, kwargs)`` or ``(model, kwargs, compiler_args)``;
        raises :class:`TraceJobError` naming the job."""
        if isinstance(job, TraceJob):
            return job
        if not isinstance(job, (tuple, list)) or len(job) not in (2, 3):
            n = len(job) if isinstance(job, (tuple, list)) else type(job).__name__
            raise TraceJobError(
                f"trace job {index}: expected (model, kwargs) or (model, kwargs, compiler_args), got "
                f"{'a ' + n if isinstance(n, str) else f'{n} elements'}"
            )
        model, kwargs = job[0], job[1]
        if not callable(model):
            raise TraceJobError(f"trace job {index}: the model ({type(model).__name__}) is not callable")
        if not isinstance(kwargs, Mapping):
            raise TraceJobError(f"trace job {index}: kwargs must be a dict of keyword arguments, got {type(kwargs).__name__}")
        args = job[2] if len(job) == 3 else None
        try:
            request = DeferredRequest(compiler_args=args, key_policy=key_policy)
        except BackendOptionError as exc:
            raise TraceJobError(f"trace job {index}: {exc}") from None
        return cls(model, kwargs, request, scoped=len(job) == 3)

    def identity(self, index: int) -> str:
        args = list(self.request.compiler_args) if self.request.compiler_args is not None else None
        return f"trace job {index} ({_model_name(self.model)}, compiler_args={args if self.scoped else '<no scope>'!r})"


def job_identity(index: int, job: Sequence[Any] | TraceJob) -> str:
    return TraceJob.from_tuple(job, index).identity(index)


def validate_jobs(jobs: Sequence[Any], *, key_policy: str = "default") -> list[TraceJob]:
    """Check every job's shape; raises :class:`TraceJobError` naming the first bad job."""
    return [TraceJob.from_tuple(job, i, key_policy) for i, job in enumerate(jobs)]


def _is_compiled(model: Any) -> bool:
    import torch

    return isinstance(model, OptimizedModule) or hasattr(model, "_torchdynamo_orig_callable")


def _trace_one(job: TraceJob, request_json: str, cache_dir: str, options: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Runs in the child, from the job's request as it crossed the fork (``request_json``)."""
    import torch

    request = DeferredRequest.from_json(request_json)
    torch.set_num_threads(1)
    torch.compiler.reset()
    CAPTURES.clear()
    model, kwargs = job.model, job.kwargs
    if not _is_compiled(model):
        model = torch.compile(model, backend=capture_backend, options=dict(options) if options else None, dynamic=False)
    scope = scoped_compiler_args(request.compiler_args) if job.scoped else contextlib.nullcontext()
    with capture_to(cache_dir, key_policy=request.key_policy), torch.no_grad(), scope:
        model(**kwargs)
    captured = CAPTURES.entries()
    if not captured:
        raise TraceJobError(
            "the job staged no graph: compile its model with backend='neuron_libtorch_graph_capture' "
            "(or pass a plain module), and check it was not already traced in this child"
        )
    return captured


def parallel_trace(
    jobs: Sequence[Sequence[Any]],
    *,
    cache_dir: str | os.PathLike | None = None,
    workers: int | None = None,
    timeout: float | None = DEFAULT_TIMEOUT_S,
    options: Mapping[str, Any] | None = None,
    raise_on_error: bool = True,
    on_done: Callable[[TraceResult], None] | None = None,
    key_policy: str = "default",
) -> list[TraceResult]:
    """Run every job in a forked child; stage the graphs under ``cache_dir``, keyed for the seam
    that will serve them (``key_policy="native"``: the native seam's structure-and-shape key).

    Returns one :class:`TraceResult` per job, in job order. With ``raise_on_error`` (the default) a
    failed job raises :class:`ParallelTraceError` after all jobs have ended. A job that hit a
    guard-rail violation raises that violation (see the module doc), with or without it.
    """
    checked = validate_jobs(jobs, key_policy=key_policy)
    directory = os.path.abspath(os.fspath(cache_dir)) if cache_dir is not None else capture_dir(CacheRoots.from_env())
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise FlowDirectoryError("parallel_trace: the staging directory (cache_dir)", directory, "is not a directory",
                                 "give a directory (it is created when missing)")
    workers = workers or max(1, min(len(checked), os.cpu_count() or 1))
    tasks = [
        (job.identity(i), (lambda job=job, text=job.request.to_json(): _trace_one(job, text, directory, options)))
        for i, job in enumerate(checked)
    ]

    def to_result(i: int, o: ChildOutcome) -> TraceResult:
        if o.ok:
            return TraceResult(i, o.identity, True, captured=list(o.value))
        if o.error_type:
            return TraceResult(i, o.identity, False, error_type=o.error_type, error=o.error, traceback=o.traceback)
        if o.timed_out:
            return TraceResult(i, o.identity, False, error_type="Timeout", error=f"still running after {timeout} s; killed")
        return TraceResult(i, o.identity, False, error_type="ChildDied", error=f"the child exited with status {o.exitcode} without a result")

    def done(i: int, o: ChildOutcome) -> None:
        if on_done is not None:
            on_done(to_result(i, o))

    outcomes = run_forked(tasks, workers=workers, timeout=timeout, on_done=done)
    for o in outcomes:
        if isinstance(o.exception, SPMDViolationError):
            reraise(o)
    results = [to_result(i, o) for i, o in enumerate(outcomes)]
    if raise_on_error and any(not r.ok for r in results):
        raise ParallelTraceError(results)
    return results
