"""How the suite's child processes report a missing capability.

A child loads the adapter by its spec and may hit :class:`NotSupported` like a test does. Run its
``main`` through :func:`run`: a :class:`NotSupported` ends the process with
:data:`~conformance.harness.not_supported.NOT_SUPPORTED_EXIT` and the reason on the last line of stderr.
The parent passes the finished process to :func:`raise_if_not_supported`, which raises
:class:`NotSupported` again in the test, where the plugin turns it into a skip.
"""

from __future__ import annotations

import sys
from typing import Callable

from conformance.harness.not_supported import NOT_SUPPORTED_EXIT, NotSupported

_MARK = "conformance: not supported: "


def run(main: Callable[[], int | None]) -> None:
    """``sys.exit(main())``, with :class:`NotSupported` turned into the agreed exit status."""
    try:
        code = main()
    except NotSupported as exc:
        exit_not_supported(exc)
    sys.exit(code or 0)


def exit_not_supported(exc: NotSupported, exit: Callable[[int], object] = sys.exit) -> None:
    """Write the reason where :func:`raise_if_not_supported` finds it and exit with the agreed
    status (``exit``: ``os._exit`` where the process must skip its teardown)."""
    sys.stderr.write(f"\n{_MARK}{exc}\n")
    sys.stderr.flush()
    exit(NOT_SUPPORTED_EXIT)


def raise_if_not_supported(returncode: int | None, output: str, what: str = "child process") -> None:
    """Raise :class:`NotSupported` (with the child's reason) when the child exited for a missing
    capability; do nothing otherwise. ``output``: the child's stderr, or its combined output."""
    if returncode != NOT_SUPPORTED_EXIT:
        return
    reasons = [line[len(_MARK):] for line in output.splitlines() if line.startswith(_MARK)]
    raise NotSupported(f"{what}: {reasons[-1] if reasons else 'exited with the not-supported status'}")
