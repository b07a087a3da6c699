"""The two compile flows in one place: in-process (``torch.compile`` with ``backend="neuron"``)
needs nothing here; the deferred flow is ``parallel_trace`` (capture in forked children) followed by
``parallel_compile`` (build the staged graphs in parallel into the NEFF cache)."""

from reference.flows.staged_build import CompileReport, ParallelCompileError, check_staged_graphs, parallel_compile
from reference.flows.tracing import ParallelTraceError, TraceJob, TraceJobError, TraceResult, parallel_trace

__all__ = [
    "CompileReport",
    "ParallelCompileError",
    "ParallelTraceError",
    "TraceJob",
    "TraceJobError",
    "TraceResult",
    "check_staged_graphs",
    "parallel_compile",
    "parallel_trace",
]
