"""Names the plugin, the support recorder and the reports share about a test's verdict."""

from __future__ import annotations

import pytest

from conformance.harness.evidence import Evidence

#: The outcome of a test whose work ran outside the implementation's compiled path: a failure to
#: pytest, its own outcome in the reports (``fell back: <reason>``).
FELL_BACK = "fell back"
#: Report property: the test's :class:`~conformance.harness.evidence.Evidence` (JSON).
EVIDENCE_PROPERTY = "conformance_evidence"
#: Report property: why the test fell back.
FELL_BACK_PROPERTY = "conformance_fell_back"
#: The live :class:`~conformance.harness.evidence.Evidence` of an item being observed (a probe reads it).
EVIDENCE = pytest.StashKey[Evidence]()


class FellBack(AssertionError):
    """Raised by a test (or its helper) whose evidence shows the work ran outside the compiled path;
    the plugin reports it as :data:`FELL_BACK` with the message as the reason."""


def fell_back(item: pytest.Item, reason: str) -> None:
    """End ``item`` with the outcome :data:`FELL_BACK`: the work it checked did not run on the
    implementation's compiled path."""
    item.user_properties.append((FELL_BACK_PROPERTY, reason))
    pytest.fail(f"fell back: {reason}", pytrace=False)
