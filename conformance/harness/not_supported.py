"""``NotSupported``: how an implementation says it lacks a capability, and the exit status that
carries it out of a child process.

Both halves of the adapter protocol raise it (the core in
:mod:`conformance.harness.implementation` and the capability groups in
:mod:`conformance.harness.capabilities`), so it lives below both; adapters keep importing it from
``conformance`` or ``conformance.harness.implementation``, which re-export it.
"""

from __future__ import annotations


class NotSupported(BaseException):
    """The implementation does not provide this capability; the test is skipped with the reason.

    It derives from :class:`BaseException`, like pytest's own outcomes, so that ``except Exception``
    in a test or probe and ``pytest.raises(Exception)`` never mistake a missing capability for the
    error a test expects.
    """


#: Exit status of a child process whose adapter raised :class:`NotSupported` (see
#: :mod:`conformance.harness.child`); the parent test turns it into a skip.
NOT_SUPPORTED_EXIT = 77
