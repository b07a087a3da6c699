"""Records of failed compiles, and the retry policy they enforce.

When a compile fails, the process holding the key's lock writes ``.failures/<key>.json`` in the
cache directory: the graph name, the error, the compiler's log, the number of consecutive failed
attempts and the time of the last one. A successful compile of the key deletes the record.

The policy (``MAX_ATTEMPTS`` and ``COOLDOWN_S``, documented in docs/caching.md):

- the first ``MAX_ATTEMPTS`` (3) attempts compile as usual, so a transient failure (a killed or
  out-of-memory compiler) costs nothing more than the retry;
- after that many consecutive failures, further attempts within ``COOLDOWN_S`` (600 s) of the last
  failure raise :class:`RecordedCompileFailure` at once, with the recorded compiler log, instead of
  running a compile that just failed three times;
- once the cool-down has passed, the next attempt compiles again (and a new failure starts a new
  cool-down). No graph is ever blocked for longer than one cool-down by its record, and deleting
  the record file retries at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Any

from reference.cache.errors import RecordedCompileFailure
from reference.cache.records import INT, NUM, STR, clamp_time, read_record, warn_rejected
from reference.core.atomic import write_atomic

MAX_ATTEMPTS = 3
COOLDOWN_S = 600.0
_LOG_LIMIT = 64_000  # characters of compiler output kept in a record
_SCHEMA = {"attempts": INT, "last_failure": NUM}
_OPTIONAL = {"graph_name": STR, "message": STR, "log": STR, "op": STR, "error": STR, "first_failure": NUM}


class FailureRecords:
    def __init__(self, root: str, *, max_attempts: int = MAX_ATTEMPTS, cooldown_s: float = COOLDOWN_S) -> None:
        self.root = root
        self.max_attempts = max_attempts
        self.cooldown_s = cooldown_s

    def path(self, key: str) -> str:
        return os.path.join(self.root, f"{key}.json")

    def get(self, key: str, *, now: float | None = None) -> dict[str, Any] | None:
        """The validated record of ``key``, or ``None``. A damaged record (not JSON, fields of the
        wrong type, not a regular file) or one dated further in the future than clocks drift is
        absent, with one warning naming the file; a time a little ahead counts as now."""
        path = self.path(key)
        rec = read_record(path, "failure record", _SCHEMA, _OPTIONAL, consequence="the key compiles as if it had none")
        if rec is None:
            return None
        last = clamp_time(float(rec["last_failure"]), now=now)
        if last is None:
            warn_rejected("failure record", path, "field 'last_failure' lies in the future",
                          "the key compiles as if it had none")
            return None
        rec["last_failure"] = last
        return rec

    def check(self, key: str, *, graph_name: str | None = None, now: float | None = None) -> None:
        """Raise :class:`RecordedCompileFailure` when the policy holds this attempt back."""
        rec = self.get(key, now=now)
        if not rec:
            return
        attempts = rec["attempts"]
        if attempts < self.max_attempts:
            return
        waited = (time.time() if now is None else now) - rec["last_failure"]
        if waited >= self.cooldown_s:
            return
        raise RecordedCompileFailure(
            graph_name or rec.get("graph_name"), key, attempts, self.cooldown_s - waited, self.path(key), rec.get("log") or "",
            recorded=str(rec.get("message") or ""), op=rec.get("op"),
        )

    def record(self, key: str, *, graph_name: str | None, error: BaseException) -> dict[str, Any]:
        """Count one more failed attempt; returns the record. Raises ``OSError`` if unwritable."""
        rec = self.get(key) or {"key": key, "attempts": 0, "first_failure": time.time()}
        said = getattr(error, "reason", None) or str(error)  # without the graph name when it has one
        rec.update(
            attempts=rec["attempts"] + 1,
            last_failure=time.time(),
            graph_name=graph_name,
            error=f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}",
            message=said.splitlines()[0] if said else "",
            op=getattr(error, "op", None),
            log=(getattr(error, "compiler_log", "") or str(error))[-_LOG_LIMIT:],
            command=getattr(error, "command", None),
            pid=os.getpid(),
        )
        os.makedirs(self.root, exist_ok=True)
        write_atomic(self.path(key), json.dumps(rec, indent=2, sort_keys=True))
        return rec

    def clear(self, key: str) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path(key))
