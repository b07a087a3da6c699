"""Compile-time monitoring and the debug dump.

With ``CompilationConfig.debug_dump_path`` set, the compilation half writes what it traced and
built under ``<debug_dump_path>/rank_<i>/``: the graph Dynamo traced (``<prefix>_traced_graph.py``),
the code Dynamo produced for the decorated forward (``decompiled_code_<n>.py``: decompiled with
``depyf`` when installed, otherwise a bytecode listing) and the stitching module
(``<prefix>_computation_graph.py``); the prefix is the backend's, or ``model``.
Files are published whole (written aside, then renamed).
"""

from __future__ import annotations

import dis
import io
import logging
import os
import tempfile
import threading
import time
import types
from typing import Any, Optional

from reference import get_rank

__all__ = [
    "start_monitoring_torch_compile",
    "end_monitoring_torch_compile",
    "debug_dump_dir",
    "dump_debug_file",
    "decompile",
    "write_text_atomically",
]

log = logging.getLogger(__name__)


class _CompileClock:
    """When the current model's compile started (one model at a time per process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._start: Optional[float] = None

    def start(self) -> None:
        with self._lock:
            self._start = time.perf_counter()

    def stop(self) -> Optional[float]:
        with self._lock:
            start, self._start = self._start, None
        return None if start is None else time.perf_counter() - start


_CLOCK = _CompileClock()


def start_monitoring_torch_compile(config: Any) -> None:
    """Start timing a model's compile, and create its debug directory when one is configured."""
    _CLOCK.start()
    path = debug_dump_dir(config)
    if path:
        os.makedirs(path, exist_ok=True)


def end_monitoring_torch_compile(config: Any) -> Optional[float]:
    """Stop timing; logs and returns the seconds since the start (``None`` if not started)."""
    elapsed = _CLOCK.stop()
    if elapsed is not None:
        log.info("torch.compile took %.2f s in total", elapsed)
    return elapsed


def debug_dump_dir(config: Any) -> str:
    """``<debug_dump_path>/rank_<i>``, or ``""`` when no dump is configured."""
    cc = getattr(config, "compilation_config", config)
    base = getattr(cc, "debug_dump_path", "") or ""
    return os.path.join(base, f"rank_{get_rank()}") if base else ""


def write_text_atomically(path: str, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader sees the old file or the whole new one."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with _suppress_os_error():
            os.unlink(tmp)
        raise


class _suppress_os_error:
    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        return exc_type is not None and issubclass(exc_type, OSError)


def dump_debug_file(config: Any, name: str, text: str) -> Optional[str]:
    """Write one debug file when a dump is configured; returns its path. A failed write only
    logs: the dump is a diagnostic and must not fail a compile."""
    folder = debug_dump_dir(config)
    if not folder:
        return None
    path = os.path.join(folder, name)
    try:
        write_text_atomically(path, text)
    except OSError as exc:
        log.warning("could not write the debug file %s: %s", path, exc)
        return None
    return path


def decompile(code: types.CodeType) -> str:
    """Python source for ``code`` when ``depyf`` is installed, else its bytecode listing."""
    try:
        import depyf  # optional, only for readable dumps
    except ImportError:
        out = io.StringIO()
        out.write(f"# bytecode of {code.co_name} (install depyf for decompiled source)\n")
        dis.dis(code, file=out)
        return out.getvalue()
    return depyf.decompile(code)
