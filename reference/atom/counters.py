"""Counts of what the compilation half did, read by tests and benchmarks as deltas.

One :class:`CompilationCounter` object holds every count; :data:`COUNTERS` is the process's. A
caller takes :meth:`~CompilationCounter.snapshot` before and :meth:`~CompilationCounter.delta`
after the work it observes, so concurrent users of the counters never need a reset.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields

__all__ = ["CompilationCounter", "CounterSnapshot", "COUNTERS"]


@dataclass(frozen=True)
class CounterSnapshot:
    """The counts at one moment (or the difference of two moments)."""

    #: Graphs the level-3 backend was handed by Dynamo.
    num_graphs_seen: int = 0
    #: Pieces produced by splitting (splitting-op pieces included).
    num_piecewise_graphs_seen: int = 0
    #: Pieces compiled (every piece that is not a splitting op): what a graph recording can hold.
    num_piecewise_capturable_graphs_seen: int = 0
    #: Compiles the piece compiler actually ran (general shape and specialized sizes).
    num_backend_compilations: int = 0
    #: Of those, compiles for one concrete size (a ``compile_sizes`` entry).
    num_specialized_compilations: int = 0
    #: Pieces loaded from the compile cache instead of compiled.
    num_cache_hits: int = 0
    #: Writes of the compile cache's map file.
    num_cache_entries_updated: int = 0
    #: Dynamo compiles of modules under ``@support_torch_compile`` (bytecode produced).
    num_dynamo_compiles: int = 0
    #: Calls the decorator's dispatcher sent straight to compiled code, without guards.
    num_guardless_dispatches: int = 0

    def __sub__(self, other: CounterSnapshot) -> CounterSnapshot:
        return CounterSnapshot(**{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)})

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class CompilationCounter:
    """Thread-safe counters; names are the fields of :class:`CounterSnapshot`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = CounterSnapshot().as_dict()

    def bump(self, name: str, by: int = 1) -> None:
        if name not in self._counts:
            raise KeyError(f"unknown compilation counter {name!r}; known: {', '.join(self._counts)}")
        with self._lock:
            self._counts[name] += by

    def snapshot(self) -> CounterSnapshot:
        with self._lock:
            return CounterSnapshot(**self._counts)

    def delta(self, since: CounterSnapshot) -> CounterSnapshot:
        """What happened after ``since`` was taken."""
        return self.snapshot() - since


COUNTERS = CompilationCounter()
