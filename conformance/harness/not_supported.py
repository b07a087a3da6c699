"""``NotSupported``: how an implementation says it lacks a capability, and the exit status that
carries it out of a child process.

Both halves of the adapter protocol raise it (the core in
:mod:`conformance.harness.implementation` and the capability groups in
:mod:`conformance.harness.capabilities`), so it lives below both; adapters keep importing it from
``conformance`` or ``conformance.harness.implementation``, which re-export it.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator


class NotSupported(BaseException):
    """The implementation does not provide this capability; the test is skipped with the reason.

    It derives from :class:`BaseException`, like pytest's own outcomes, so that ``except Exception``
    in a test or probe and ``pytest.raises(Exception)`` never mistake a missing capability for the
    error a test expects.
    """


#: Exit status of a child process whose adapter raised :class:`NotSupported` (see
#: :mod:`conformance.harness.child`); the parent test turns it into a skip.
NOT_SUPPORTED_EXIT = 77


_suite_asks = contextvars.ContextVar("conformance_suite_asks", default=False)


@contextlib.contextmanager
def asked_by_the_suite() -> Iterator[None]:
    """Mark the adapter calls made inside as the harness's own questions (which backends to observe,
    which graph-break rule the implementation declares), not a test's: a refusal met there is
    handled by the harness, and the honest adapters' watch (``conformance.selfcheck.honest``) does not
    count it against the test that happens to be running."""
    token = _suite_asks.set(True)
    try:
        yield
    finally:
        _suite_asks.reset(token)


def suite_is_asking() -> bool:
    """Whether the current adapter call is one of the harness's own questions (:func:`asked_by_the_suite`)."""
    return _suite_asks.get()
