"""Units of the suite's reporting: snapshot summaries, the snapshot review, reports, expectation files.

Pure functions on hand-written inputs, plus a throwaway git repository for the review (the real
``git`` binary; nothing else is faked).
"""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conformance.harness import expectations

from conformance.reporting import report, snapshot_review
from conformance.harness.snapshots import dumps_compact, mlir_summary

MODULE = """\
// graph 0 of 1
module {
  func.func @main(%arg0: tensor<4x8xf32>, %arg1: tensor<8xf32>) -> tensor<4x8xf32> {
    %0 = stablehlo.broadcast_in_dim %arg1, dims = [1] : (tensor<8xf32>) -> tensor<4x8xf32>
    %1 = stablehlo.add %arg0, %0 : tensor<4x8xf32>
    %2 = stablehlo.add %1, %1 : tensor<4x8xf32>
    %3:2 = "stablehlo.while"(%2, %2) ({
      stablehlo.return %2, %2 : tensor<4x8xf32>, tensor<4x8xf32>
    }) : (tensor<4x8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
    return %1 : tensor<4x8xf32>
  }
}
"""


def test_mlir_summary_is_the_main_signature_and_the_op_histogram():
    assert mlir_summary(MODULE) == (
        "// summary: @main(tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32> | ops: "
        "stablehlo.add=2 stablehlo.broadcast_in_dim=1 stablehlo.return=1 stablehlo.while=1"
    )


def test_json_snapshots_put_one_top_level_key_on_a_line():
    text = dumps_compact({"b": {"y": [1, 2], "x": None}, "a": "s"})
    assert text == '{\n"a":"s",\n"b":{"x":null,"y":[1,2]}\n}\n'
    assert json.loads(text) == {"b": {"y": [1, 2], "x": None}, "a": "s"}
    assert dumps_compact([3, {"k": 1}]) == '[3,{"k":1}]\n'


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True, capture_output=True)


def test_snapshot_review_lists_added_changed_removed_with_op_and_signature_changes(tmp_path):
    root = tmp_path / "conformance/goldens/impl/test_hlo_snapshots"
    root.mkdir(parents=True)
    (root / "a.mlir").write_text(MODULE)
    (root / "gone.json").write_text('{"x":1}\n')
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "base")
    (root / "a.mlir").write_text(MODULE.replace("%2 = stablehlo.add %1, %1", "%2 = stablehlo.multiply %1, %1")
                                 .replace("%arg1: tensor<8xf32>", "%arg1: tensor<8xbf16>"))
    (root / "gone.json").unlink()
    (root / "new.txt").write_text("hello\n")

    changes = snapshot_review.collect(tmp_path, "HEAD", ["conformance/goldens"])
    assert [(Path(c.path).name, c.kind) for c in changes] == [("a.mlir", "changed"), ("gone.json", "removed"), ("new.txt", "added")]
    ops, sigs = snapshot_review.mlir_delta(changes[0])
    assert ops == ["stablehlo.add: 2 -> 1", "stablehlo.multiply: 0 -> 1"]
    assert len(sigs) == 2 and sigs[0].startswith("- @main(tensor<4x8xf32>, tensor<8xf32>)") and "8xbf16" in sigs[1]
    page = snapshot_review.render_markdown("HEAD", changes)
    assert "1 added, 1 changed, 1 removed." in page and "- stablehlo.multiply: 0 -> 1" in page
    assert "+    %2 = stablehlo.multiply %1, %1 : tensor<4x8xf32>" in page
    assert "<span class='a'>+    %2 = stablehlo.multiply" in snapshot_review.render_html("HEAD", changes)
    assert snapshot_review.main(["--base", "no-such-ref", "--out", str(tmp_path / "r.md")]) == 2


def _summary() -> dict:
    return {
        "implementation": "impl", "lane": "default", "spec": "m:f", "started": "2026-01-01T00:00:00+00:00",
        "versions": {"torch": "2"}, "totals": dict.fromkeys(report.OUTCOMES, 0) | {"passed": 1, "failed": 1, "xfailed": 1},
        "tests": [
            {"id": "test_a.py::test_ok", "outcome": "passed", "duration": 0.5, "message": ""},
            {"id": "test_a.py::test_bad[x]", "outcome": "failed", "duration": 2.0, "message": "AssertionError: 1 != 2\nmore"},
            {"id": "test_b.py::test_known", "outcome": "xfailed", "duration": 1.0, "message": "known: why"},
        ],
    }


def test_junit_has_one_case_per_test_with_failure_and_skip_elements():
    root = ET.fromstring(report.junit(_summary()))
    assert root.get("name") == "conformance-impl-default" and root.get("tests") == "3" and root.get("failures") == "1"
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert cases["test_bad[x]"].find("failure").get("message") == "AssertionError: 1 != 2"
    assert cases["test_known"].find("skipped") is not None and cases["test_ok"].find("failure") is None


def test_compile_time_chart_has_a_bar_per_graph_slowest_first():
    svg = report.compile_time_svg([{"graph": "g<1>", "test": "t.py::a", "seconds": 1.0},
                                   {"graph": "g2", "test": "t.py::b", "seconds": 3.0}])
    root = ET.fromstring(svg)
    bars = [r for r in root.iter("{http://www.w3.org/2000/svg}rect")]
    assert [float(b.get("width")) for b in bars] == [360.0, 120.0]
    assert "g&lt;1&gt;" in svg and report.compile_time_svg([]) == ""


def test_expectation_files_need_a_reason_and_match_by_module_and_name():
    parsed = expectations.parse("# c\n\nconformance/test_a.py::test_x[1]  # broken\ntest_a.py::test_y # also\n")
    assert parsed.reason_for("../x/conformance/test_a.py::test_x[1]") == "broken"
    assert parsed.reason_for("test_a.py::test_x[2]") is None
    assert [e.nodeid for e in parsed.stale(["test_a.py::test_x[1]", "test_b.py::test_z"])] == ["test_a.py::test_y"]
    assert parsed.stale(["test_b.py::test_z"]) == []  # its module did not run: not stale
    with pytest.raises(pytest.UsageError, match=r"f.txt:2: 'test_a.py::test_x' has no reason"):
        expectations.parse("# c\ntest_a.py::test_x\n", "f.txt")
    with pytest.raises(pytest.UsageError, match="not a test id"):
        expectations.parse("test_x  # why\n")


def test_conformance_properties_keep_the_rejection_health_check_and_inherit_hypothesis_profiles():
    from hypothesis import HealthCheck, settings as hsettings

    from conformance.harness.properties import settings

    ours = settings(max_examples=7)
    assert ours.max_examples == 7 and ours.deadline is None
    assert HealthCheck.filter_too_much not in ours.suppress_health_check
    ci = hsettings.get_profile("conformance-ci")
    assert ci.derandomize == hsettings.get_profile("ci").derandomize  # inherited, not redefined


def _full_summary() -> dict:
    tests = [
        {"id": "test_eager_parity.py::test_ok", "outcome": "passed", "duration": 0.5, "message": ""},
        {"id": "test_eager_parity.py::test_f16", "outcome": "fell back", "duration": 0.5,
         "message": "fell back: g0: float16 has no kernel\nmore", "evidence": {"graphs": 1, "fallbacks": [{}]}},
        {"id": "test_cache_key.py::test_bad", "outcome": "failed", "duration": 2.0, "message": "AssertionError: 1 != 2\nmore"},
        *({"id": f"test_backend_support.py::test_var_{i}", "outcome": "skipped", "duration": 0.0,
           "message": "not supported by x: no variables"} for i in range(8)),
        {"id": "test_fx_passes.py::test_one", "outcome": "skipped", "duration": 0.0, "message": "other reason"},
    ]
    totals = dict.fromkeys(report.OUTCOMES, 0)
    contracts: dict = {}
    for x in tests:
        totals[x["outcome"]] += 1
        c = contracts.setdefault(x["id"].split("::")[0][5:-3], dict.fromkeys(report.OUTCOMES, 0))
        c[x["outcome"]] += 1
    return {
        "implementation": "impl", "lane": "default", "spec": "m:f", "started": "2026-01-01T00:00:00+00:00",
        "wall_s": 1.0, "invocation": {"args": []}, "versions": {"torch": "2"}, "precision": "float64 computed as float32",
        "totals": totals, "contracts": contracts, "tests": tests, "compile_times": [], "stale_expectations": [],
        "support": [
            {"table": "variables", "row": "NEURON_CC_FLAGS", "status": "Unsupported", "declared": None, "notes": "n",
             "evidence": None},
            {"table": "parameters", "row": "model", "status": "Fell back", "declared": "Supported", "notes": "fell back: g0",
             "evidence": {"graphs": 2, "backend_runs": 2, "fallbacks": [{"graph": "g0", "reason": "r"}]}},
        ],
    }


def test_summary_md_opens_with_failures_and_fallbacks_and_summarises_skips_by_reason():
    page = report.render_markdown(_full_summary())
    first = page[: page.index("## Totals per contract")]
    assert "Precision: float64 computed as float32" in first
    assert "## Failures and fallbacks (2)" in first
    assert first.index("### cache_key (1)") < first.index("### eager_parity (1)")
    assert "- **fell back** `test_f16`: g0: float16 has no kernel\n" in first
    assert "- **failed** `test_bad`: AssertionError: 1 != 2\n" in first
    assert "## Skips by reason (9)" in first
    assert "| 8 | not supported by x: no variables | `test_backend_support.py::test_var_0`" in first and "and 2 more |" in first
    assert "| 1 | other reason | `test_fx_passes.py::test_one` |" in first
    general, neuron = page.index("## Support matrix: general rows"), page.index("## Support matrix: Neuron-specific rows")
    assert general < page.index("`model`") < neuron < page.index("`NEURON_CC_FLAGS`")
    assert "| parameters | `model` | Fell back ⚠ | Supported | 2 compiled / 2 run, 1 fell back | fell back: g0 |" in page
    root = ET.fromstring(report.junit(_full_summary()))
    assert root.get("failures") == "2"


def test_an_undeclared_loss_of_precision_fails_saying_so_and_a_declared_one_passes():
    import torch

    from conformance.harness.precision import Precision
    from conformance.harness.tolerances import POLICY, assert_close

    exact = torch.randn(64, dtype=torch.float64)
    narrowed = exact.float().double()
    # an implementation that declares nothing computes every dtype as itself (the suite's run may
    # have set another implementation's policy for the session: this test states its own)
    with POLICY.use(Precision()), pytest.raises(
        AssertionError, match=r"undeclared loss of precision: torch.float64 results match eager only "
                              r"within float32's bounds .* declares every float dtype computed as itself"):
        assert_close(narrowed, exact)
    with POLICY.use(Precision({"float64": "float32"}, note="no f64 units")) as policy:
        assert_close(narrowed, exact)
        assert policy.describe() == "float64 computed as float32; every other dtype as itself (no f64 units)"
    with pytest.raises(AssertionError, match="Tensor-likes are not close"):  # no narrower dtype explains it
        assert_close(exact + 1, exact)
    with pytest.raises(ValueError, match="wider"):
        Precision({"float32": "float64"})
    assert Precision({"float32": "tf32"}).computed_as(torch.float32) == "float16"


def test_a_module_skipped_at_collection_is_in_summary_json_and_the_totals_match_pytests_line(tmp_path):
    # test_models.py skips itself at collection without transformers: a stand-in module that fails
    # to import (ModuleNotFoundError, what importorskip skips on) hides the installed one in this child. The summary must count it as pytest does.
    import os
    import re
    import sys

    (tmp_path / "shadow").mkdir()
    (tmp_path / "shadow" / "transformers.py").write_text("raise ModuleNotFoundError('hidden for this test', name='transformers')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONFORMANCE_", "PYTEST_XDIST_"))}
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "shadow"), str(root)])
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance/tests/test_models.py", "-p", "no:cacheprovider", "-o", "addopts=",
         "--conformance-impl", "conformance.adapters.torch_builtin:aot_eager", "--conformance-report-dir", str(tmp_path / "r")],
        cwd=root, env=env, capture_output=True, text=True, timeout=300,
    )
    line = run.stdout.strip().splitlines()[-1]
    assert re.search(r"\b1 skipped\b", line), run.stdout[-2000:]
    summary = json.loads(next((tmp_path / "r").rglob("summary.json")).read_text())
    entry = summary["tests"]["test_models.py"] if isinstance(summary["tests"], dict) else next(
        t for t in summary["tests"] if t["id"] == "test_models.py"
    )
    assert entry["outcome"] == "skipped" and "the model lane needs the 'models' extra" in entry["message"]
    counted = {k: v for k, v in summary["totals"].items() if v}
    assert counted == {"skipped": 1}
