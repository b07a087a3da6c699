"""The op lane's edge variant: the rows of the op lane (``test_ops.py``) again, each sample's tensors
of the row's dtype re-drawn at the edges of that dtype (``conformance/harness/edges.py``: for a
float dtype, values near the max and at the bottom of the normal range of the dtype the
implementation declares computing it in, and inf, -inf, nan and -0.0 among ordinary values; for
int64, values near its bounds; bool has none), compiled through the adapter and compared with eager.

It runs with ``CONFORMANCE_OPS_EDGES=1`` (``CONFORMANCE_OPS_EDGES=1 make ops``), over the rows
``CONFORMANCE_OPS`` selects; otherwise it is one skip. Outcomes follow the verdict as in the op lane;
known rows are ``conformance/expected/ops/<impl>-edges.txt`` (``entry dtype  # cause``). The
verdicts go to ``op-verdicts-edges/``, and the op table (``ops.md``, ``ops.json``) shows them beside
the rows' verdicts on OpInfo's own samples (``conformance/reporting/ops_edges.py``).
"""

from __future__ import annotations

import pytest

from conformance.harness import opinfo
from conformance.harness.env import ops_edges
from conformance.harness.implementation import Implementation, NotSupported
from conformance.harness.outcomes import FellBack
from conformance.plugin import SUITE
from conformance.reporting import ops_table
from conformance.reporting.ops_edges import VARIANT
from conformance.tests.test_ops import CRASH, parametrize_rows

pytestmark = pytest.mark.contract("ops")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "op_row" not in metafunc.fixturenames:
        return
    if not ops_edges():
        metafunc.parametrize("op_row", [pytest.param(None, marks=pytest.mark.skip(
            reason="the op lane's edge variant runs with CONFORMANCE_OPS_EDGES=1"))], ids=["off"])
        return
    parametrize_rows(metafunc)


def test_op_matches_eager_at_the_edges(op_row: tuple[str, str], impl: Implementation, pytestconfig: pytest.Config) -> None:
    entry, dtype = op_row
    report_dir = pytestconfig.stash[SUITE].report_dir()
    cause = ops_table.known_rows(impl, VARIANT).get((entry, dtype))
    if cause is not None and cause.startswith(CRASH):  # not run again: it would take the worker down
        ops_table.record(report_dir, opinfo.Verdict(entry, dtype, opinfo.ERROR, opinfo.CRASHED), VARIANT)
        pytest.xfail(f"known, not run: {cause}")
    # recorded first, so a row whose run kills the worker still has its verdict in the table
    ops_table.record(report_dir, opinfo.Verdict(entry, dtype, opinfo.ERROR, opinfo.CRASHED), VARIANT)

    def ended_at_bound() -> None:
        ops_table.record(report_dir, opinfo.timed_out(entry, dtype, opinfo.ROW_TIMEOUT_S, ended_process=True), VARIANT)

    try:
        with opinfo.row_deadline(opinfo.ROW_TIMEOUT_S, on_hard_expiry=ended_at_bound):
            row = opinfo.run_op(impl, opinfo.entries()[entry], dtype, edges=True)
    except opinfo.RowTimedOut as exc:
        row = opinfo.timed_out(entry, dtype, exc.seconds)
    except NotSupported as exc:
        ops_table.record(report_dir, opinfo.Verdict(entry, dtype, opinfo.NOT_SUPPORTED, str(exc)), VARIANT)
        raise
    except Exception as exc:
        ops_table.record(report_dir, opinfo.Verdict(entry, dtype, opinfo.ERROR, opinfo.first_line(exc)), VARIANT)
        raise
    ops_table.record(report_dir, row, VARIANT)
    bad = row.verdict in (opinfo.WRONG, opinfo.ERROR, opinfo.UNDECLARED_BREAK, opinfo.FELL_BACK)
    ordinary = ops_table.known_rows(impl).get((entry, dtype)) or (
        f"checked-in verdict {verdict!r}" if (verdict := ops_table.checked_in_verdict(impl, entry, dtype))
        in (opinfo.WRONG, opinfo.ERROR, opinfo.UNDECLARED_BREAK, opinfo.FELL_BACK) else None)
    if cause is None and bad and ordinary is not None:
        pytest.xfail(f"fails on OpInfo's own samples too ({ordinary}); at the edges {row.verdict}: {row.detail}")
    if cause is not None:
        if not bad and cause.startswith(ops_table.HOST):
            return  # either verdict, by the host's eager kernels
        if not bad:
            pytest.fail(f"{entry} {dtype} is listed as known at the edges ({cause}) but now {row.verdict}; "
                        f"remove its line from {ops_table.known_file(impl, VARIANT)}")
        pytest.xfail(f"known at the edges ({cause}); {row.verdict}: {row.detail}")
    if row.verdict == opinfo.NOT_SUPPORTED:
        pytest.skip(row.detail)
    if row.verdict == opinfo.FELL_BACK:
        raise FellBack(row.detail)
    assert row.verdict in (opinfo.MATCHES, opinfo.GRAPH_BREAK), f"at the edges: {row.verdict}: {row.detail} [{row.sample}]"
