"""The one atomic file writer: a reader sees the old file, or the whole new one, never a part."""

from __future__ import annotations

import contextlib
import itertools
import os
import threading

_counter = itertools.count()
_lock = threading.Lock()


def write_atomic(path: str | os.PathLike, data: str | bytes, *, fsync: bool = False) -> None:
    """Write ``data`` to ``path`` through a hidden temporary file in the same directory and an
    ``os.replace``. ``fsync`` flushes the data to the disk before the rename (for records that must
    survive a crash). Raises ``OSError``; the temporary file is removed on failure."""
    path = os.fspath(path)
    with _lock:
        n = next(_counter)
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.{threading.get_ident()}.{n}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
