"""Per-graph compilation metrics (``get_dynamo_metrics``) and the ``graph_stats`` table."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class NeuronCompilationMetrics:
    graph_id: str
    graph_name: str
    model_name: str
    has_collectives: bool
    graph_node_count: int
    timestamp: str
    torch_neuronx_fx_passes_us: int
    torch_neuronx_lower_us: int
    _compile_us: int | None = field(default=None, repr=False)
    _compile_us_source: Callable[[], int] | None = field(default=None, repr=False, compare=False)

    @property
    def torch_neuronx_compile_us(self) -> int:
        """Compile time; read lazily, since the artifact may still be building when recorded."""
        if self._compile_us is None and self._compile_us_source is not None:
            self._compile_us = int(self._compile_us_source())
        return int(self._compile_us or 0)

    def as_row(self) -> dict[str, object]:
        return {
            "graph_id": self.graph_id,
            "graph_name": self.graph_name,
            "model_name": self.model_name,
            "has_collectives": self.has_collectives,
            "graph_node_count": self.graph_node_count,
            "timestamp": self.timestamp,
            "torch_neuronx_fx_passes_us": self.torch_neuronx_fx_passes_us,
            "torch_neuronx_lower_us": self.torch_neuronx_lower_us,
            "torch_neuronx_compile_us": self.torch_neuronx_compile_us,
        }


#: How many fallback events :class:`MetricsRegistry` keeps (the oldest go first); an observer reads
#: the ones after the count it noted, so only a block with more than this many loses some.
FALLBACKS_KEPT = 1000


@dataclass(frozen=True)
class Fallback:
    """One piece of work that ran outside the compiled path: the graph and why."""

    graph: str
    reason: str


class MetricsRegistry:
    """The records of this process, plus counters (compiler invocations, cache hits).

    Besides what :meth:`reset` clears (``reset_dynamo_metrics``), the registry keeps process-long
    totals of every counter (:meth:`totals`) and the graphs that ran outside the compiled path
    (:meth:`fallbacks_since`): an observer notes them before a block of work and reads the
    difference after it, whatever the block reset in between.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[NeuronCompilationMetrics] = []
        self._counters: dict[str, int] = {}
        self._totals: dict[str, int] = {}
        self._fallbacks: list[Fallback] = []
        self._fallback_count = 0
        self._graph_counts: dict[tuple[str, str, str], int] = {}
        self._listeners: list[Callable[[NeuronCompilationMetrics], None]] = []

    def add_listener(self, fn: Callable[[NeuronCompilationMetrics], None]) -> None:
        """Call ``fn(record)`` after each record (the metric tables use it); idempotent."""
        with self._lock:
            if fn not in self._listeners:
                self._listeners.append(fn)

    def record(self, m: NeuronCompilationMetrics) -> None:
        with self._lock:
            self._records.append(m)
            listeners = list(self._listeners)
        for fn in listeners:
            fn(m)

    def records(self) -> list[NeuronCompilationMetrics]:
        with self._lock:
            return list(self._records)

    def bump(self, name: str, by: int = 1) -> None:
        with self._lock:
            self._counters[name] = self._counters.get(name, 0) + by
            self._totals[name] = self._totals.get(name, 0) + by

    def totals(self) -> dict[str, int]:
        """Every counter since the process started (:meth:`reset` does not clear these)."""
        with self._lock:
            return dict(self._totals)

    def note_fallback(self, graph: str, reason: str) -> None:
        """Record that ``graph`` ran outside the compiled path (eagerly), and why."""
        with self._lock:
            self._fallbacks.append(Fallback(graph, " ".join(str(reason).split())))
            self._fallback_count += 1
            del self._fallbacks[:-FALLBACKS_KEPT]
            self._totals["fallbacks"] = self._fallback_count

    def fallback_count(self) -> int:
        with self._lock:
            return self._fallback_count

    def fallbacks_since(self, count: int) -> list[Fallback]:
        """The fallbacks recorded after :meth:`fallback_count` returned ``count`` (at most the
        last :data:`FALLBACKS_KEPT`)."""
        with self._lock:
            return list(self._fallbacks[-min(self._fallback_count - count, len(self._fallbacks)):]) if self._fallback_count > count else []

    def counters(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counters)

    def next_graph_index(self, model_name: str, aot_id: str, graph_type: str) -> int:
        with self._lock:
            k = (model_name, aot_id, graph_type)
            n = self._graph_counts.get(k, 0)
            self._graph_counts[k] = n + 1
            return n

    def reset(self) -> None:
        with self._lock:
            self._records.clear()
            self._counters.clear()
            self._graph_counts.clear()


METRICS = MetricsRegistry()


def get_dynamo_metrics() -> list[NeuronCompilationMetrics]:
    return METRICS.records()


def reset_dynamo_metrics() -> None:
    METRICS.reset()
