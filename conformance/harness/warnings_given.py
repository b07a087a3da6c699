"""What an implementation warned about in a block, whichever way it said it.

Backends report a problem the caller should know of (an ignored setting, a fallback, a cache
entry refused) through Python's ``warnings`` or through ``logging`` at WARNING or above; both are
what a user sees. Every test that checks that a warning was given reads it through
:func:`warnings_given`, so a backend that logs passes where one that warns does, and the other way
round. (The SPMD guard rails are the exception: their contract is a ``UserWarning`` in the default
mode and an error under strict mode, so those tests ask for the ``warnings`` category itself.)
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from typing import Iterator

__all__ = ["warnings_given"]


class _Records(logging.Handler):
    def __init__(self, into: list[str]) -> None:
        super().__init__(level=logging.WARNING)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.into.append(record.getMessage())
        except Exception:  # a record whose arguments do not format: keep its raw message
            self.into.append(str(record.msg))


@contextlib.contextmanager
def warnings_given() -> Iterator[list[str]]:
    """Collect, for the block, every ``warnings.warn`` message and every log record at WARNING or
    above that reaches the root logger; the list is complete when the block exits, also when it
    raises."""
    seen: list[str] = []
    handler = _Records(seen)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                yield seen
            finally:
                seen.extend(str(w.message) for w in caught)
    finally:
        root.removeHandler(handler)
