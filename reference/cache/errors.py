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
