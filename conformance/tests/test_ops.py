"""The op lane: every OpInfo entry of torch's ``op_db`` with CPU samples, for float32, float16,
bfloat16, int64 and bool where the entry supports them, compiled through the adapter's ``compile``
and compared with eager (conformance/harness/opinfo.py runs a row and gives its verdict).

One test per (entry, dtype). Its outcome follows the verdict: *matches* and *graph break* (the op
ran outside the compiled graph by a rule the implementation declares or by one of Dynamo's own,
named reasons, and its result still matches eager) pass; *wrong*, *error* and *undeclared graph
break* (a break from no declared rule) fail; *fell back* ends ``fell back`` (the suite's outcome for
work that left the compiled path: any sample whose compiled call ran every compute op of its graph
as an ATen kernel, as the suite's observer saw it, or a fallback the implementation reported);
*not supported* (the adapter raised ``NotSupported``, or OpInfo has no CPU sample) skips. A row listed in the implementation's
known-rows file (``conformance/expected/ops/<impl>.txt``: ``entry dtype  # cause``) is an expected
failure naming its cause, and a listed row that now matches fails until the line is removed; a cause
starting ``host:`` is a row whose verdict depends on the host's eager kernels (either is accepted).

For the reference, the verdict must also be the one in the checked-in table
(``docs/support/reference-ops.json``): a row whose verdict changed is drift, and the test says to
regenerate the table with ``make ops-docs``. The full table's drift is ``make ops-drift``.

``make test`` runs a deterministic sample (:data:`SAMPLE_SIZE` rows of those the checked-in table
covers, by a hash of the row, plus :data:`PINNED`); ``make ops`` (``CONFORMANCE_OPS=all``) runs every row and writes
``reports/<impl>/ops/ops.md`` and ``ops.json``. Each test leaves its verdict in
``reports/<impl>/<lane>/op-verdicts/``, which the table is made from.

A row is bounded by :data:`~conformance.harness.opinfo.ROW_TIMEOUT_S` of wall time: past it the row
is stopped and is an *error* naming the bound, and the worker goes on to the next row; a row stuck
in native code that does not stop within the grace period ends its worker (pytest-xdist starts
another), its verdict recorded first.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.harness import opinfo
from conformance.harness.env import ops_part, ops_selection
from conformance.harness.implementation import Implementation, NotSupported
from conformance.harness.outcomes import FellBack
from conformance.plugin import SUITE
from conformance.reporting import ops_table

pytestmark = pytest.mark.contract("ops")

#: About how many rows ``make test`` runs: a fixed sample, by a hash of the row, of the rows the
#: implementation's checked-in table covers (all rows when it has none), plus :data:`PINNED`.
SAMPLE_SIZE = 20
#: Rows ``make test`` runs besides the sample, each with why: the selfcheck's op mutant breaks
#: int64 remainder, and the sample must be able to catch it.
PINNED = {("remainder", "int64"): "the selfcheck mutant 'remainder_truncates' breaks this row"}
#: A known row whose cause starts with this is not run (see the test).
CRASH = "crash:"


def _selected(impl: Implementation) -> list[tuple[str, str]]:
    every, dtypes = ops_selection()
    rows = list(opinfo.iter_rows())
    if dtypes:
        rows = [r for r in rows if r[1] in dtypes]
    part = ops_part()
    if part is not None:  # CONFORMANCE_OPS_PART=K/N: one part of them (make ops-drift-part)
        rows = [r for r in rows if opinfo.in_part(*r, part)]
    if every:
        return rows
    covered = ops_table.covered_rows(impl)
    pool = [r for r in rows if r in covered] if covered else rows
    every_nth = max(1, len(pool) // SAMPLE_SIZE)
    return [r for r in rows if (r in pool and opinfo.seed_for(*r) % every_nth == 0) or r in PINNED]


def parametrize_rows(metafunc: pytest.Metafunc) -> None:
    """One ``op_row`` per selected (entry, dtype), or one skip when OpInfo cannot be imported."""
    try:
        rows = _selected(metafunc.config.stash[SUITE].impl())
    except opinfo.OpLaneUnavailable as exc:
        metafunc.parametrize("op_row", [pytest.param(None, marks=pytest.mark.skip(reason=str(exc)))], ids=["op_db"])
        return
    metafunc.parametrize("op_row", rows, ids=[f"{e}-{d}" for e, d in rows])


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "op_row" in metafunc.fixturenames:
        parametrize_rows(metafunc)


def test_op_matches_eager(op_row: tuple[str, str], impl: Implementation, pytestconfig: pytest.Config) -> None:
    entry, dtype = op_row
    suite = pytestconfig.stash[SUITE]
    known = ops_table.known_rows(impl)
    cause = known.get((entry, dtype))
    if cause is not None and cause.startswith(CRASH):
        # a row known to kill the process is not run again: it would take the worker (and, in
        # make test, the other tests queued on it) down with it
        ops_table.record(suite.report_dir(), opinfo.Verdict(entry, dtype, opinfo.ERROR, opinfo.CRASHED))
        pytest.xfail(f"known, not run: {cause}")
    # recorded before the run too, so a row whose run kills the worker (a segmentation fault in a
    # runtime) still has its verdict in the table
    ops_table.record(suite.report_dir(), opinfo.Verdict(entry, dtype, opinfo.ERROR, opinfo.CRASHED))
    report_dir = suite.report_dir()

    def ended_at_bound() -> None:  # the hard stop: the process is about to end; leave the row's verdict
        ops_table.record(report_dir, opinfo.timed_out(entry, dtype, opinfo.ROW_TIMEOUT_S, ended_process=True))

    try:
        with opinfo.row_deadline(opinfo.ROW_TIMEOUT_S, on_hard_expiry=ended_at_bound):
            row = opinfo.run_op(impl, opinfo.entries()[entry], dtype)
    except opinfo.RowTimedOut as exc:  # stopped at the bound: an error row; the worker goes on
        row = opinfo.timed_out(entry, dtype, exc.seconds)
    except NotSupported as exc:
        ops_table.record(suite.report_dir(), opinfo.Verdict(entry, dtype, opinfo.NOT_SUPPORTED, str(exc)))
        raise
    except Exception as exc:  # the lane's own step (samples, compile call) raised: an error row, not a crash
        ops_table.record(suite.report_dir(), opinfo.Verdict(entry, dtype, opinfo.ERROR, opinfo.first_line(exc)))
        raise
    ops_table.record(suite.report_dir(), row)
    bad = row.verdict in (opinfo.WRONG, opinfo.ERROR, opinfo.UNDECLARED_BREAK, opinfo.FELL_BACK)
    checked_in = ops_table.checked_in_verdict(impl, entry, dtype)
    host = cause is not None and cause.startswith(ops_table.HOST)  # either verdict, by the host's eager
    if host and not bad:
        return
    if checked_in is not None and checked_in != row.verdict and not host:
        pytest.fail(f"{entry} {dtype}: the checked-in table (docs/support/) says {checked_in!r}, this run "
                    f"{row.verdict!r}: {row.detail} [{row.sample}]; if intended, run `make ops-docs` and commit")
    if cause is not None:
        if not bad:
            pytest.fail(f"{entry} {dtype} is listed as known ({cause}) but now {row.verdict}; "
                        f"remove its line from {ops_table.known_file(impl)}")
        pytest.xfail(f"known ({cause}); {row.verdict}: {row.detail}")
    if row.verdict == opinfo.NOT_SUPPORTED:
        pytest.skip(row.detail)
    if row.verdict == opinfo.FELL_BACK:
        raise FellBack(row.detail)
    assert row.verdict in (opinfo.MATCHES, opinfo.GRAPH_BREAK), f"{row.verdict}: {row.detail} [{row.sample}]"
