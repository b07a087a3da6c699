"""Typed errors and warnings of the compile caches."""

from __future__ import annotations

from reference.core.errors import NEFFCompilationError, NeuronBackendError


class CacheLockTimeoutError(NeuronBackendError):
    """Waiting for another process's compile of the same key took longer than the lock timeout."""

    def __init__(self, key: str, lock_path: str, timeout: float, holder: str) -> None:
        super().__init__(
            f"timed out after {timeout:g} s waiting for the compile lock of cache key {key} "
            f"({lock_path}); held by {holder}. The holder is still compiling this graph: raise "
            "TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT (seconds) or wait for it to finish"
        )
        self.key = key
        self.lock_path = lock_path
        self.timeout = timeout
        self.holder = holder


class CacheWriteError(NeuronBackendError):
    """A cache directory could not be written (read-only, full, or gone)."""

    def __init__(self, what: str, path: str, cause: BaseException) -> None:
        super().__init__(f"could not write the {what} at {path}: {cause}")
        self.path = path
        self.cause = cause


class RecordedCompileFailure(NEFFCompilationError):
    """The graph failed to compile on its recent attempts; the record's retry policy holds the
    next attempt back until its cool-down ends. The message starts with what the last attempt
    raised (and ``op`` is the op it named), so a held-back attempt says as much as a failed one."""

    def __init__(
        self,
        graph_name: str | None,
        key: str,
        attempts: int,
        retry_in_s: float,
        record_path: str,
        log: str,
        *,
        recorded: str = "",
        op: str | None = None,
    ) -> None:
        held = (
            f"cache key {key} failed to compile {attempts} times in a row; not retrying for another "
            f"{retry_in_s:.0f} s (delete {record_path} to retry now)"
        )
        super().__init__(
            f"{recorded} [{held}]" if recorded else held,
            graph_name=graph_name,
            compiler_log=log,
            op=op,
        )
        self.key = key
        self.attempts = attempts
        self.record_path = record_path


class CacheFallbackWarning(UserWarning):
    """A cache could not be used; the compile went ahead without it."""


class RecordPathError(NeuronBackendError, ValueError):
    """A file name read from a cache record points outside the record's folder (an absolute path,
    ``..``, or a symbolic link). The message names the record and the field, never the value."""

    def __init__(self, record: str, field: str, problem: str) -> None:
        super().__init__(
            f"{record}: field {field!r} {problem}; a cache record may only name files inside its own "
            "folder. Delete the entry (or stage the graph again) and do not copy entries from sources "
            "you do not trust"
        )
        self.record = record
        self.field = field


class UnloadableArtifactError(NeuronBackendError):
    """An artifact whose checksums match could not be loaded by the runtime, even after it was
    rebuilt once. The message names the cache entry."""

    def __init__(self, graph_name: str | None, entry: str, cause: BaseException) -> None:
        super().__init__(
            f"graph {graph_name!r}: the runtime could not load the artifact of cache entry {entry}, "
            f"even after evicting and rebuilding it ({type(cause).__name__}: {cause}). Check that the "
            "installed IREE runtime matches the compiler (pip show iree-base-runtime iree-base-compiler)"
        )
        self.graph_name = graph_name
        self.entry = entry
        self.cause = cause
