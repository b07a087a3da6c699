"""The support matrix renderer: observations in, the backend reference's columns out. Reports are
built by hand here (pytest's own TestReport), standing in for a run."""

from __future__ import annotations

import json

import pytest
from _pytest.reports import TestReport

from conformance.reporting import support


def _report(outcome, when="call", recorded=None, row=("parameters", "dynamic"), longrepr=None, order=0):
    props = [(support.ROW_PROPERTY, json.dumps(list(row))), ("conformance_support_order", str(order))]
    if recorded is not None:
        props.append((support.PROPERTY, json.dumps(recorded)))
    return TestReport("conformance/tests/test_backend_support.py::t", ("f", 0, "t"), {}, outcome, longrepr, when, user_properties=props)


def test_a_recorded_observation_becomes_a_row():
    obs = {"table": "parameters", "item": "dynamic", "status": "Unsupported", "notes": "rejected"}
    c = support.Collected()
    c.add(_report("passed", recorded=obs))
    c.add(_report("passed", when="teardown", recorded=obs))  # counted once
    text = support.render("impl", {"torch": "x"}, c.observations, c.order())
    assert "## torch.compile parameters" in text
    assert "| `dynamic` | Unsupported | — | rejected |" in text
    assert text.count("`dynamic`") == 1


def test_a_skipped_probe_is_unsupported_with_the_reason_and_a_crash_is_unknown():
    c = support.Collected()
    c.add(_report("skipped", when="setup", longrepr=("f", 1, "Skipped: not supported by x: no helper API"), row=("helper_api", "get_rank()")))
    c.add(_report("failed", longrepr="AssertionError: boom", row=("apis", "reset"), order=1))
    text = support.render("x", {}, c.observations, c.order())
    assert "| `get_rank()` | Unsupported | — | not supported by x: no helper API |" in text
    assert "| `reset` | Unknown | — | probe failed: AssertionError: boom |" in text


def test_rows_keep_probe_order_and_several_probes_of_a_row_combine():
    rows = [
        {"table": "variables", "item": "B", "status": "Supported", "notes": "b"},
        {"table": "variables", "item": "A", "status": "Supported", "notes": "a1"},
        {"table": "variables", "item": "A", "status": "Unsupported", "notes": "a2"},
    ]
    text = support.render("x", {}, rows, [("variables", "B"), ("variables", "A")])
    assert text.index("`B`") < text.index("`A`")
    assert "| `A` | Partial | — | a1 a2 |" in text


def test_a_status_outside_the_three_is_refused():
    class Node:
        user_properties: list = []

    with pytest.raises(ValueError, match="Supported"):
        support.Recorder(Node(), None, "parameters", "x").record("Works", "")
    with pytest.raises(ValueError, match="unknown support table"):
        support.support_marker("nope", "x")


def test_a_crashed_probe_is_noted_by_its_error_not_by_a_file_and_line():
    try:
        raise AttributeError("'int' object has no attribute 'data'")
    except AttributeError as exc:
        longrepr = pytest.ExceptionInfo.from_exception(exc).getrepr()
    c = support.Collected()
    c.add(_report("failed", longrepr=longrepr, row=("parameters", "dynamic")))
    text = support.render("x", {}, c.observations, c.order())
    assert "| `dynamic` | Unknown | — | probe failed: AttributeError: 'int' object has no attribute 'data' |" in text
    assert ".py:" not in text
