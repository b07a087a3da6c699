"""The project's own parallel runs (make test, make slow): the longest modules are handed out first.

pytest-xdist hands tests (or, under ``--dist=loadgroup``, whole ``xdist_group`` modules) to idle
workers in collection order, so a long module collected last (the conformance suite's grouped
modules come after ``tests/``) left one worker running alone at the end. Here every module moves,
whole and in its own order, by its measured time in ``.test_durations`` (``make durations``),
longest first; a module with no record counts as short. Only the order changes, never the selection,
and only in an xdist worker of a run that is not one of pytest-split's groups (those choose their
tests by the same file, whatever the order). Not part of the suite users install: their runs
collect in pytest's order.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from conformance.harness.env import xdist_worker

DURATIONS = Path(__file__).resolve().parent / ".test_durations"


def module_seconds(durations: dict[str, float]) -> dict[str, float]:
    """Seconds per test module (``path/to/test_x.py``) from pytest-split's per-test record."""
    totals: dict[str, float] = defaultdict(float)
    for test_id, seconds in durations.items():
        totals[test_id.split("::", 1)[0]] += float(seconds)
    return dict(totals)


def longest_modules_first(items: list, seconds: dict[str, float]) -> list:
    """``items`` with each module's tests kept together and in order, modules by ``seconds``
    descending (a stable sort: modules of equal time keep their collection order)."""
    return sorted(items, key=lambda item: -seconds.get(item.nodeid.split("::", 1)[0], 0.0))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    if not xdist_worker() or getattr(config.option, "splits", None):
        return
    try:
        durations = json.loads(DURATIONS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # no record: pytest's order
    items[:] = longest_modules_first(items, module_seconds(durations))
