"""What the reference tells its user while it works: warnings and log lines.

**Warnings** (:func:`warn_user`) are attributed to the user's code: the first frame outside the
reference, torch and the standard library, so Python's default filter shows each one once per
line of user code that caused it, pointing at that line (a compile runs deep inside Dynamo, where a
fixed ``stacklevel`` would name a torch file). A warning is never also logged.

**Log lines** go to the ``reference`` logger and its children (``reference.pipeline``, ...):

- one INFO line per graph served (name, key prefix, hit/miss/compiled, seconds);
- progress of long operations on ``reference.progress``: "still compiling graph X (N s)", "waiting
  for the lock on key K held by pid P (N s)", and ``parallel_compile``'s graphs done/total and ETA.

By default (no logging configured), a handler on ``reference`` prints WARNING and above, and
``reference.progress`` at INFO: a fast compile prints nothing, a slow one says what it is doing
every :data:`PROGRESS_EVERY_S` seconds, so a long compile or lock wait is never silent. (The
lowering keeps torch-mlir from configuring the root logger behind the program's back:
:func:`reference.lowering.stablehlo.lower_to_stablehlo`.)
``TORCH_LOGS="reference"`` shows the per-graph INFO lines too (``TORCH_LOGS="+reference"``: DEBUG);
torch reads ``TORCH_LOGS`` at import and gives the logger its own handler and format, and the
default handler then stays out of the way. A program that configures ``logging`` itself (a handler
on the root logger) gets no default handler: its configuration decides.
"""

from __future__ import annotations

import logging
import os
import sys
import sysconfig
import threading
import time
import warnings
from typing import Callable

import torch

ROOT = "reference"
PROGRESS = "reference.progress"
#: Seconds between two progress lines of one long operation (the first comes after this long).
PROGRESS_EVERY_S = 10.0

_REFERENCE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Where frames are not the user's: the reference, torch (Dynamo, AOT Autograd) and the standard library.
_INTERNAL = tuple(
    os.path.join(resolve(p), "")
    for p in (_REFERENCE_DIR, os.path.dirname(os.path.abspath(torch.__file__)), sysconfig.get_paths()["stdlib"])
    for resolve in (os.path.abspath, os.path.realpath)  # a frame names the path it was imported by
)


def _internal(filename: str) -> bool:
    return filename.startswith(_INTERNAL) or filename.startswith("<frozen ")


def user_stacklevel() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` made by the caller of this function that points
    at the first frame outside the reference, torch and the standard library (the outermost frame
    when every frame is internal)."""
    frame = sys._getframe(1)  # the caller, where warnings.warn is called: stacklevel 1
    level = 1
    while frame is not None and _internal(frame.f_code.co_filename):
        if frame.f_back is None:
            return level
        frame = frame.f_back
        level += 1
    return level


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` attributed to the user's frame (see the module docstring)."""
    warnings.warn(message, category, stacklevel=user_stacklevel())


# --- log lines ------------------------------------------------------------------------------------------

_SETUP = threading.Lock()
_DEFAULT_HANDLER: list[logging.Handler] = []


def _configured_elsewhere(logger: logging.Logger) -> bool:
    """Whether someone else decides where the reference's lines go: torch's ``TORCH_LOGS`` (its
    handler on the logger) or the program's own logging configuration (a root handler)."""
    return bool(logging.getLogger().handlers) or any(h not in _DEFAULT_HANDLER for h in logger.handlers)


def ensure_default_handler() -> None:
    """Install the default handler (module docstring) unless logging is configured elsewhere.
    Called by the backend before it compiles, never at import."""
    with _SETUP:
        logger = logging.getLogger(ROOT)
        if _DEFAULT_HANDLER or _configured_elsewhere(logger):
            return
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[reference] %(message)s"))
        handler.addFilter(_default_filter)
        logger.addHandler(handler)
        progress = logging.getLogger(PROGRESS)
        if progress.level == logging.NOTSET:
            # only the progress lines: the per-graph INFO lines are not even made unless asked for
            progress.setLevel(logging.INFO)
        _DEFAULT_HANDLER.append(handler)


def _default_filter(record: logging.LogRecord) -> bool:
    if record.levelno >= logging.WARNING:
        return True
    return record.name == PROGRESS and record.levelno >= logging.INFO


def remove_default_handler() -> None:
    """Undo :func:`ensure_default_handler` (for tests, and programs that want silence)."""
    with _SETUP:
        logger = logging.getLogger(ROOT)
        for handler in _DEFAULT_HANDLER:
            logger.removeHandler(handler)
        _DEFAULT_HANDLER.clear()


class Heartbeat:
    """Logs ``message(seconds)`` on ``reference.progress`` every ``every`` seconds while a block
    runs (from a daemon thread; nothing is logged when the block ends sooner)::

        with Heartbeat(lambda s: f"still compiling graph {name} ({s:.0f} s)"):
            compile()
    """

    def __init__(self, message: Callable[[float], str], every: float | None = None) -> None:
        self._message = message
        self._every = PROGRESS_EVERY_S if every is None else every
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._start = 0.0

    def __enter__(self) -> "Heartbeat":
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="reference-heartbeat", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        log = logging.getLogger(PROGRESS)
        while not self._done.wait(self._every):
            log.info(self._message(time.monotonic() - self._start))

    def __exit__(self, *exc) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
