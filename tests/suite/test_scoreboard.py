"""The scoreboard builder without a browser: what it reads, what it skips, what the page holds.

tests/browser/test_scoreboard_page.py opens the built page in Chromium (make scoreboard-test).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from conformance.reporting import spec_coverage
from conformance.reporting.scoreboard import page, sources
from conformance.reporting.scoreboard.__main__ import main

DOCS = Path(__file__).resolve().parents[2] / "docs" / "support"
PAYLOAD = "<script>alert('x')</script>"


def summary(impl: str = "reference", lane: str = "default", started: str = "2026-12-01T10:00:00+00:00", **extra) -> dict:
    """A run's summary.json as the plugin writes it, with the fields the scoreboard reads."""
    tests = [
        {"id": "test_backend_contract.py::test_compiles", "outcome": "passed", "duration": 0.1, "message": "",
         "spec": ["001.param.model"]},
        {"id": f"test_backend_contract.py::test_named[{PAYLOAD}]", "outcome": "failed", "duration": 0.1,
         "message": f"AssertionError: {PAYLOAD} & more", "spec": ["001.param.fullgraph-true-raises"]},
        {"id": "test_cache_key.py::test_key", "outcome": "fell back", "duration": 0.1, "message": "fell back: eager ran"},
        {"id": "test_cache_key.py::test_skip", "outcome": "skipped", "duration": 0.0, "message": "not supported by it"},
    ]
    totals = dict.fromkeys(("passed", "failed", "fell back", "error", "skipped", "xfailed", "xpassed"), 0)
    contracts: dict[str, dict[str, int]] = {}
    for t in tests:
        totals[t["outcome"]] += 1
        c = contracts.setdefault(t["id"].split(".py")[0].removeprefix("test_"), dict.fromkeys(totals, 0))
        c[t["outcome"]] += 1
    return {"schema_version": 3, "implementation": impl, "lane": lane, "started": started, "wall_s": 1.5,
            "totals": totals, "contracts": contracts, "tests": tests, "support": [], **extra}


def op_table(impl: str, rows: list[tuple[str, str, str]]) -> dict:
    return {"implementation": impl, "entries": len({r[0] for r in rows}), "partial": "", "samples_per_row": 3,
            "counts": {}, "per_dtype": {},
            "rows": [{"entry": e, "dtype": d, "verdict": v, "detail": f"detail of {e} {d}", "sample": "sample 0",
                      "samples": 3, "tolerance": "exact"} for e, d, v in rows]}


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """A docs/support/ with two small op tables and the reference's real support matrix, and a
    reports/ with one run."""
    docs, reports = tmp_path / "docs", tmp_path / "reports"
    docs.mkdir()
    (docs / "reference-ops.json").write_text(json.dumps(op_table("reference", [
        ("add", "float32", "matches"), ("add", "bool", "error"), ("sort", "float16", "wrong")])))
    table = op_table("inductor", [("add", "float32", "matches"), ("sort", "float16", "graph break")])
    table["rows"][1]["known"] = f"a known cause {PAYLOAD}"
    (docs / "inductor-ops.json").write_text(json.dumps(table))
    shutil.copy(DOCS / "reference.md", docs / "reference.md")
    run = reports / "reference" / "default"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps(summary()))
    return {"docs": docs, "reports": reports, "out": tmp_path / "out"}


def _page(tree, history: Path | None = None) -> tuple[str, sources.Inputs]:
    inputs = sources.read(tree["docs"], tree["reports"], history)
    index = page.write(tree["out"], page.shape(inputs), generated="2026-12-06T00:00:00+00:00")
    return index.read_text(encoding="utf-8"), inputs


def _embedded(html: str) -> tuple[str, dict]:
    raw = re.search(r'<script type="application/json" id="scoreboard-data">(.*?)</script>', html, re.S).group(1)
    return raw, json.loads(raw)


def test_report_text_is_escaped_in_the_html_and_in_the_embedded_json(tree):
    html, _ = _page(tree)
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html  # the failing test's id and its message
    assert "AssertionError: &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; more" in html
    raw, data = _embedded(html)
    assert "<" not in raw and ">" not in raw and "&" not in raw
    assert f"a known cause {PAYLOAD}" in data["ops"]["strings"]  # JSON.parse gives the text back as it was
    assert html.count("<script") == 2  # the data element and scoreboard.js, nothing else


def test_a_malformed_or_foreign_summary_is_skipped_with_a_warning_naming_it(tree, capsys):
    bad = tree["reports"] / "inductor" / "default" / "summary.json"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"schema_version": 3, "implementation": ')
    foreign = tree["reports"] / "coverage" / "x" / "summary.json"
    foreign.parent.mkdir(parents=True)
    foreign.write_text(json.dumps({"name": "a coverage tool's summary", "totals": {"lines": 10}}))
    assert main(["--docs", str(tree["docs"]), "--reports", str(tree["reports"]), "--out", str(tree["out"])]) == 0
    err = capsys.readouterr().err
    assert f"warning: skipped {bad}: not valid JSON" in err
    assert f"warning: skipped {foreign}: not a conformance summary.json (no 'schema_version'" in err
    html = (tree["out"] / "index.html").read_text(encoding="utf-8")
    assert "2 inputs skipped" in html and str(foreign) in html
    _, inputs = _page(tree)
    assert [r["implementation"] for r in inputs.runs] == ["reference"]


def test_the_data_holds_every_row_contract_and_statement(tree):
    inputs = sources.read(tree["docs"], tree["reports"])
    data = page.shape(inputs)
    assert [i["name"] for i in data["impls"]] == ["reference", "inductor"]
    ops = data["ops"]
    assert ops["entries"] == ["add", "sort"] and ops["dtypes"] == ["float32", "float16", "bool"]
    decoded = {(ops["entries"][c[0]], ops["dtypes"][c[1]], ops["verdicts"][c[2]], ops["strings"][c[3]])
               for c in ops["impls"]["reference"]["cells"]}
    assert decoded == {("add", "float32", "matches", "detail of add float32"), ("add", "bool", "error", "detail of add bool"),
                       ("sort", "float16", "wrong", "detail of sort float16")}
    assert ops["impls"]["inductor"]["counts"] == {"wrong": 0, "error": 0, "graph break": 1, "matches": 1}
    (run,) = data["runs"]
    assert run["contracts"]["backend_contract"]["failed"] == 1 and run["contracts"]["cache_key"]["fell back"] == 1
    assert [x["outcome"] for x in run["problems"]["backend_contract"]] == ["failed"]
    assert run["problems"]["cache_key"][0]["message"] == "fell back: eager ran"
    statements = [st for s in data["seeds"]["seeds"] for st in s["statements"]]
    assert len(statements) == len(spec_coverage.load())
    by_id = {st["id"]: st for st in statements}
    assert by_id["001.param.model"]["verdicts"] == {"reference": {"verdict": "met", "note": ""}, "inductor": None}
    assert by_id["001.param.fullgraph-true-raises"]["verdicts"]["reference"]["verdict"] == "failed"
    model = next(r for t in data["support"] for r in t["rows"] if r["row"] == "model")
    assert model["cells"]["reference"]["status"] == "Supported"


def test_history_gives_each_implementation_its_runs_in_time_order(tree, tmp_path):
    history = tmp_path / "history"
    for i, day in enumerate(("2026-11-03", "2026-11-01")):
        (history / str(i)).mkdir(parents=True)
        (history / str(i) / "summary.json").write_text(json.dumps(summary(started=f"{day}T10:00:00+00:00")))
    (history / "notes.json").write_text("[1, 2]")
    html, inputs = _page(tree, history)
    assert [p for p, _ in inputs.skipped] == [str(history / "notes.json")]
    series = page.history_data(inputs)
    assert [(h["impl"], h["lane"]) for h in series] == [("reference", "default")]
    assert [p["started"][:10] for p in series[0]["points"]] == ["2026-11-01", "2026-11-03", "2026-12-01"]
    assert len(series[0]["chart"]["bars"]) == 3 and 'role="img"' in html


def test_the_checked_in_tables_make_a_page_of_three_op_tables(tmp_path):
    inputs = sources.read(DOCS, tmp_path / "no-reports")
    data = page.shape(inputs)
    names = [i["name"] for i in data["impls"]]
    assert names[:3] == ["reference", "inductor", "aot_eager"]
    for name in names[:3]:
        table = json.loads((DOCS / f"{name}-ops.json").read_text(encoding="utf-8"))
        assert len(data["ops"]["impls"][name]["cells"]) == len(table["rows"])
        assert data["ops"]["impls"][name]["counts"] == {v: n for v, n in table["counts"].items() if v in data["ops"]["verdicts"]}
    html = page.render(data, generated="now")
    assert len(html.encode()) < 1_500_000  # the grid travels compact: a string table, cells as numbers


def test_a_missing_docs_directory_is_an_error_naming_it(tmp_path):
    with pytest.raises(sources.ScoreboardInputError, match=re.escape(str(tmp_path / "nowhere"))):
        sources.read(tmp_path / "nowhere", None)


def test_runs_are_read_from_every_reports_directory_and_a_second_of_one_lane_is_skipped(tree, tmp_path):
    alone = tmp_path / "reports" / "suite-alone"
    (alone / "aot_eager" / "default").mkdir(parents=True)
    (alone / "aot_eager" / "default" / "summary.json").write_text(json.dumps(summary(impl="aot_eager")))
    again = tmp_path / "elsewhere" / "reference" / "default" / "summary.json"
    again.parent.mkdir(parents=True)
    again.write_text(json.dumps(summary()))
    inputs = sources.read(tree["docs"], [tree["reports"], alone, tmp_path / "elsewhere", tmp_path / "absent"])
    assert [(r["implementation"], r["lane"]) for r in inputs.runs] == [("reference", "default"), ("aot_eager", "default")]
    assert inputs.skipped == [(str(again), "a second summary of reference, lane default (the first one found is shown)")]
    assert inputs.implementations() == ["reference", "inductor", "aot_eager"]


def test_what_the_compiled_calls_ran_is_a_rows_evidence(tree):
    table = op_table("aot_eager", [("add", "float32", "undeclared graph break")])
    table["rows"][0]["ran"] = "ops run as ATen kernels: aten.add.Tensor"
    (tree["docs"] / "aot_eager-ops.json").write_text(json.dumps(table))
    ops = page.shape(sources.read(tree["docs"], None))["ops"]
    (cell,) = ops["impls"]["aot_eager"]["cells"]
    assert ops["verdicts"][cell[2]] == "undeclared graph break" and ops["abbr"]["undeclared graph break"] == "brk?"
    assert ops["strings"][cell[8]] == "ops run as ATen kernels: aten.add.Tensor"
