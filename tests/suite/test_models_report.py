"""The model lane's report (conformance/reporting/models_report.py): rows merged from the parts, failures
and parts not run shown as such. Reports are built by hand here (no model runs)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from conformance.reporting import models_report


def _report(props, *, when="call", passed=True, skipped=False, longrepr=None, text=""):
    return SimpleNamespace(user_properties=props, when=when, passed=passed, failed=not (passed or skipped),
                           skipped=skipped, longrepr=longrepr, longreprtext=text)


def _row(model, part):
    return (models_report.ROW_PROPERTY, json.dumps([model, part]))


def _obs(model, part, **kw):
    return (models_report.PROPERTY, json.dumps({"model": model, "part": part, **kw}))


def test_one_row_per_model_with_breaks_errors_and_first_call_time():
    c = models_report.Collected()
    c.add(_report([_row("mixtral", "decode"), _obs("mixtral", "decode", ok=True, graphs=2, breaks=[],
                                                   max_error=7.7e-7, first_call_s=24.04)]))
    c.add(_report([_row("mixtral", "generate"), _obs("mixtral", "generate", ok=False, graphs=3,
                                                     breaks=["histc: Op not supported"], max_error=None,
                                                     first_call_s=30.0, note="tokens differ")], passed=False))
    c.add(_report([_row("bert", "forward")], skipped=True, longrepr=("f", 1, "Skipped: run by make models")))
    c.add(_report([_row("vit", "forward")], passed=False, text="Traceback\nAssertionError: vit logits: mismatch"))
    text = models_report.render("reference", {"torch": "2.13.0"}, c.rows)
    rows = {line.split(" | ")[0].strip("| `"): line for line in text.splitlines() if line.startswith("| `")}
    assert set(rows) == {"mixtral", "bert", "vit"}
    assert "FAIL; generate: tokens differ" in rows["mixtral"] and "decode ok generate FAIL" in rows["mixtral"]
    assert "histc: Op not supported" in rows["mixtral"] and "7.7e-07" in rows["mixtral"] and "30.0" in rows["mixtral"]
    assert "| not run |" in rows["bert"]
    assert "FAIL; forward: AssertionError: vit logits: mismatch" in rows["vit"]
