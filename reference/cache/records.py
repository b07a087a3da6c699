"""The one reader of cache records: whatever is on disk, a caller gets a valid record or nothing.

Every small record the caches keep (an entry's ``metadata.json``, a failure record, a lock's holder
note, a plan, an HLO record, a staged entry's files) is read here. A cache directory may be on a
shared mount, may have been damaged by a crash or a full disk, or may hold things someone planted;
a compile must never hang or die on it. So a record is read only when it is:

- a regular file (opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked with ``fstat``): a symbolic
  link, a FIFO (which would block ``open`` forever), a socket, a device or a directory is not a
  record;
- a JSON object whose fields have the types its schema names (``bool`` is not an ``int``);
- (for the caller) consistent with where it was found: its key, its checksums, its HMAC.

Anything else is *absent*, with one warning per file and reason naming the file
(:class:`~reference.cache.errors.CacheFallbackWarning`), never an exception. The warning says what
was wrong, never what the file holds.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import stat
import threading
import time
from typing import Any, Mapping

from reference.core.diagnostics import warn_user
from reference.cache.errors import CacheFallbackWarning, RecordPathError

log = logging.getLogger(__name__)

#: A record bigger than this is not a record (HLO records hold whole modules; allow those).
MAX_RECORD_BYTES = 1 << 30

#: How far in the future a recorded time may lie before the record is taken to be wrong (clocks of
#: hosts sharing a cache mount differ by a little).
CLOCK_SKEW_S = 300.0

_KEY = re.compile(r"^[0-9a-f]{32}$")

INT = "int"
NUM = "number"
STR = "str"
LIST = "list"
DICT = "dict"
BOOL = "bool"


class RecordRejected(Exception):
    """Internal: why a file is not a usable record (the reader turns it into a warning)."""


def _is(value: Any, kind: str) -> bool:
    if kind == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == NUM:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value  # no NaN
    if kind == STR:
        return isinstance(value, str)
    if kind == LIST:
        return isinstance(value, list)
    if kind == DICT:
        return isinstance(value, dict)
    if kind == BOOL:
        return isinstance(value, bool)
    raise ValueError(kind)


def valid_key(value: Any) -> bool:
    """Whether ``value`` is a cache key as the caches make them: 32 lowercase hex characters."""
    return isinstance(value, str) and bool(_KEY.match(value))


def read_regular(path: str, *, limit: int = MAX_RECORD_BYTES) -> bytes | None:
    """The bytes of ``path`` if it is a regular file; ``None`` if there is nothing there.

    Raises :class:`RecordRejected` for a symbolic link, anything that is not a regular file, a file
    over ``limit`` bytes, or one that cannot be read. Never blocks on a FIFO."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RecordRejected("it is a symbolic link") from None
        if exc.errno in (errno.ENXIO, errno.EWOULDBLOCK):
            raise RecordRejected("it is not a regular file") from None
        if exc.errno == errno.ENOTDIR:
            return None
        raise RecordRejected(f"it cannot be opened ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RecordRejected("it is not a regular file")
        if st.st_size > limit:
            raise RecordRejected(f"it is larger than {limit} bytes")
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise RecordRejected(f"it cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)


def parse_object(data: bytes, schema: Mapping[str, str], optional: Mapping[str, str] = {}) -> dict[str, Any]:
    """``data`` as a JSON object whose ``schema`` fields are present with their types, and whose
    ``optional`` fields, when present and not null, have theirs. Raises :class:`RecordRejected`."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise RecordRejected("it is not valid JSON") from None
    if not isinstance(doc, dict):
        raise RecordRejected(f"it holds a JSON {type(doc).__name__}, not an object")
    for name, kind in schema.items():
        if name not in doc:
            raise RecordRejected(f"field {name!r} is missing")
        if not _is(doc[name], kind):
            raise RecordRejected(f"field {name!r} is not a {kind}")
    for name, kind in optional.items():
        if doc.get(name) is not None and not _is(doc[name], kind):
            raise RecordRejected(f"field {name!r} is not a {kind}")
    return doc


_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def warn_rejected(what: str, path: str, why: str, consequence: str = "it is treated as absent") -> None:
    """One warning per file and reason (per process), naming the file and attributed to the user's
    line; each later sighting is a debug log line (a warning that is also logged prints twice)."""
    msg = f"{what} {path} is not usable: {why}; {consequence}"
    with _warned_lock:
        seen = (path, why) in _warned
        _warned.add((path, why))
    if seen:
        log.debug(msg)
        return
    warn_user(msg, CacheFallbackWarning)


def read_record(
    path: str, what: str, schema: Mapping[str, str], optional: Mapping[str, str] = {}, *,
    consequence: str = "it is treated as absent",
) -> dict[str, Any] | None:
    """A validated JSON record at ``path``, or ``None`` (absent, or rejected with one warning)."""
    try:
        data = read_regular(path)
        if data is None:
            return None
        return parse_object(data, schema, optional)
    except RecordRejected as why:
        warn_rejected(what, path, str(why), consequence)
        return None


def clamp_time(value: float, *, now: float | None = None) -> float | None:
    """A recorded time, or ``None`` when it lies further in the future than clocks drift apart;
    a time a little ahead (another host's clock) counts as now."""
    now = time.time() if now is None else now
    if value > now + CLOCK_SKEW_S:
        return None
    return min(value, now)


def confined(folder: str, name: Any, *, record: str, field: str) -> str:
    """The path of ``name`` inside ``folder``, for a file name read from a record.

    Raises :class:`~reference.cache.errors.RecordPathError` naming the record and the field when
    the name is not a plain relative path or would resolve (through ``..`` or a symbolic link)
    outside ``folder``. The error never repeats the name itself."""
    if not isinstance(name, str) or not name or "\0" in name:
        raise RecordPathError(record, field, "is not a file name")
    if os.path.isabs(name):
        raise RecordPathError(record, field, "is an absolute path")
    if ".." in name.replace("\\", "/").split("/"):
        raise RecordPathError(record, field, "climbs out of its folder with '..'")
    root = os.path.realpath(folder)
    target = os.path.realpath(os.path.join(folder, name))
    if os.path.commonpath([root, target]) != root or target == root:
        raise RecordPathError(record, field, "resolves outside its folder")
    return os.path.join(folder, name)
