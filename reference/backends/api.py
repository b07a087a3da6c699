"""The backend's helper API (the seeds' ``neuron_dynamo_backend`` surface) and the metric tables.

Everything here is re-exported from :mod:`reference`:

- ``set_model_name`` / ``get_model_name`` (default ``model_default``; names are sanitized into one
  safe path component), ``get_rank``;
- ``get_dynamo_metrics`` / ``reset_dynamo_metrics`` (one ``NeuronCompilationMetrics`` per graph);
- ``compile_only()``: a context in which compiles build artifacts without executing them, the same
  as ``TORCH_NEURONX_COMPILE_ONLY=1`` for the block;
- the ``graph_stats`` metric table: with ``TORCH_NEURONX_ENABLED_METRIC_TABLES=graph_stats`` every
  compiled graph appends one CSV row to ``<TORCH_NEURONX_METRICS_DIR>/graph_stats.csv``;
- ``to_device`` / ``is_device_tensor`` (see :mod:`reference.backends.device`);
- ``set_graph_break_thresholds`` (see :mod:`reference.backends.graph_breaks`).
"""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import os
import threading
from typing import Iterator

from reference.core import env
from reference.core.install import require_compiler_stack
from reference.core.settings import get_model_name, get_rank, set_model_name
from reference.backends.debug_artifacts import DEBUG_ARTIFACTS
from reference.backends.device import is_device_tensor, to_device
from reference.core.errors import EnvVarError, NEFFCompilationError, NEFFExecutionError
from reference.backends.graph_breaks import reset_graph_break_thresholds, set_graph_break_thresholds
from reference.core.metrics import METRICS, NeuronCompilationMetrics, get_dynamo_metrics, reset_dynamo_metrics

log = logging.getLogger(__name__)

__all__ = [
    "set_model_name", "get_model_name", "get_rank", "get_dynamo_metrics", "reset_dynamo_metrics",
    "NeuronCompilationMetrics", "NEFFCompilationError", "NEFFExecutionError", "compile_only",
    "METRIC_TABLES", "enabled_metric_tables", "graph_stats_path", "to_device", "is_device_tensor",
    "set_graph_break_thresholds", "reset_graph_break_thresholds", "preflight",
]

#: The metric tables this backend can write.
METRIC_TABLES = ("graph_stats",)
GRAPH_STATS_COLUMNS = (
    "graph_id", "graph_name", "model_name", "has_collectives", "graph_node_count", "timestamp",
    "torch_neuronx_fx_passes_us", "torch_neuronx_lower_us", "torch_neuronx_compile_us",
)


@contextlib.contextmanager
def compile_only() -> Iterator[None]:
    """Compile in this block without executing: artifacts are built (and cached), and the
    compiled callables return eager results. Same as ``TORCH_NEURONX_COMPILE_ONLY=1``."""
    with env.override(**{env.COMPILE_ONLY: True}):
        yield


def enabled_metric_tables() -> tuple[str, ...]:
    """The tables named in ``TORCH_NEURONX_ENABLED_METRIC_TABLES``; an unknown one raises."""
    tables = env.get(env.ENABLED_METRIC_TABLES)
    unknown = [t for t in tables if t not in METRIC_TABLES]
    if unknown:
        raise EnvVarError(env.ENABLED_METRIC_TABLES, ",".join(tables), "a comma-separated list of: " + ", ".join(METRIC_TABLES))
    return tables


def graph_stats_path() -> str:
    return os.path.join(env.get(env.METRICS_DIR), "graph_stats.csv")


_csv_lock = threading.Lock()
_warned_dirs: set[str] = set()


def _write_graph_stats(record: NeuronCompilationMetrics) -> None:
    """Append one row; a metrics directory that is missing is created, one that cannot be written
    is reported once as a warning (a metrics table never fails a compile)."""
    try:
        if "graph_stats" not in enabled_metric_tables():
            return
        path = graph_stats_path()
    except EnvVarError as exc:  # preflight reports these before compiling; never fail here
        log.warning("graph_stats not written: %s", exc)
        return
    row = record.as_row()
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    with _csv_lock:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            new = not os.path.exists(path) or os.path.getsize(path) == 0
            if new:
                writer.writerow(GRAPH_STATS_COLUMNS)
            writer.writerow([row[c] for c in GRAPH_STATS_COLUMNS])
            # one write per row with O_APPEND: rows from concurrent processes do not interleave
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, buf.getvalue().encode())
            finally:
                os.close(fd)
        except OSError as exc:
            d = os.path.dirname(path)
            if d not in _warned_dirs:
                _warned_dirs.add(d)
                log.warning("graph_stats: cannot write %s (%s); set TORCH_NEURONX_METRICS_DIR to a writable directory", path, exc)


METRICS.add_listener(_write_graph_stats)


def preflight() -> None:
    """Check the settings a compile depends on before it starts, so that a bad one raises a clear
    error instead of failing half-way: the compiler stack is installed, every variable parses, the
    metric tables are known, the debug directory is writable."""
    require_compiler_stack()
    env.validate_all()
    enabled_metric_tables()
    DEBUG_ARTIFACTS.directory()
