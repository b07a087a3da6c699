"""CI's default lane as K groups: together they run exactly the tests one `make test` runs, and
the joined reports are the reports of one run.

The first test runs ``scripts/ci_groups.py`` as CI's machines would see the tree (a real pytest
collection of the not-slow tests, in a process of its own, grouped by pytest-split's own algorithm
with the checked-in ``.test_durations``). The last ones run a small conformance module for real,
once whole and once as two groups through pytest-split's command line, and join the groups with
``python -m conformance.reporting.merge``; those are in the slow lane (the three pytest runs cost
make test about 13 s).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import ci_groups  # noqa: E402

from conformance.harness.env import unmeasured  # noqa: E402
from conformance.harness.forkserver import ForkServer, run_module  # noqa: E402
from conformance.reporting import merge  # noqa: E402

# The module fixture runs pytest three times: --dist=loadgroup keeps the module on one xdist worker.
# The tests that use it are slow (make slow).
pytestmark = pytest.mark.xdist_group("ci_groups")

# cheap probes of the support matrix: a join must carry their rows besides the outcomes
SMALL = ["conformance/tests/test_backend_support.py", "-k",
         "cache_variables_are_read or test_var_ and not nki and not cc_flags or test_options or test_mode or test_name"]


def _recipe(target: str) -> str:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    match = re.search(rf"^{re.escape(target)}:.*?\n((?:\t.*\n)+)", text, re.M)
    assert match, f"no {target} target in the Makefile"
    return match.group(1)


def test_make_test_and_each_group_select_the_same_tests():
    """The groups split what `make test` selects: the same marker expression in both recipes and
    in the script that checks the split."""
    marks = f'-m "{ci_groups.MARKS}"'
    assert marks in _recipe("test") and marks in _recipe("test-group")
    assert "--splits $(SPLITS) --group $(GROUP)" in _recipe("test-group")
    assert "--durations-path .test_durations" in _recipe("test-group")


def test_the_workflows_groups_run_every_test_of_make_test_exactly_once(tmp_path):
    splits = ci_groups.workflow_splits()
    assert splits >= 2
    out = tmp_path / "groups.json"
    # a collection only (scripts/ is not measured, and what the suite's modules run at import the
    # session itself covers): not measured for coverage, a quarter less time
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "ci_groups.py"), "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env=unmeasured(os.environ))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = json.loads(out.read_text())
    collected, groups = got["collected"], got["groups"]
    assert len(groups) == splits and all(groups), [len(g) for g in groups]
    flat = [t for g in groups for t in g]
    assert len(flat) == len(set(flat)), "a test is in two groups"
    assert sorted(flat) == sorted(collected)
    assert len(collected) > 1000  # the whole not-slow selection, not a module of it
    assert not any("test_ci_groups.py" in t and "slow" in t for t in collected)


def test_check_names_a_lost_and_a_doubled_test():
    assert ci_groups.check(["a", "b", "c"], [["a"], ["b", "c"]]) == []
    problems = ci_groups.check(["a", "b", "c"], [["a", "b"], ["b"]])
    assert problems == ["b is in group 1 and group 2", "c is in no group"]


def _run(server: ForkServer, args: list[str], report_dir: Path) -> subprocess.CompletedProcess:
    return run_module("pytest", [*SMALL, "-q", "-n", "0", "-p", "no:randomly", "--conformance-report-dir", str(report_dir), *args],
                      env=dict(os.environ), cwd=str(ROOT), server=server)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``SMALL`` run whole and as groups 1 and 2 of 2 (pytest-split's command line, even split)."""
    base = tmp_path_factory.mktemp("split-runs")
    out = {}
    # the three runs fork from one interpreter that has imported torch and Dynamo (about 3 s a run)
    with ForkServer(("torch", "torch._dynamo"), env=dict(os.environ), interpreters=1) as server:
        for name, args in (("whole", []), ("g1", ["--splits", "2", "--group", "1"]), ("g2", ["--splits", "2", "--group", "2"])):
            proc = _run(server, args, base / name)
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
            out[name] = base / name / "reference" / "default"
    return out


@pytest.mark.slow
def test_joined_groups_report_what_one_run_reports(runs, tmp_path):
    whole = merge.load(runs["whole"])
    g1, g2 = merge.load(runs["g1"]), merge.load(runs["g2"])
    assert g1["tests"] and g2["tests"], "each group ran some of the module"
    assert not {t["id"] for t in g1["tests"]} & {t["id"] for t in g2["tests"]}
    proc = subprocess.run([sys.executable, "-m", "conformance.reporting.merge", "--out", str(tmp_path / "joined"),
                           str(runs["g1"]), str(runs["g2"])], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    joined = json.loads((tmp_path / "joined" / "summary.json").read_text())
    assert [(t["id"], t["outcome"]) for t in joined["tests"]] == [(t["id"], t["outcome"]) for t in whole["tests"]]
    assert joined["totals"] == whole["totals"] and joined["contracts"] == whole["contracts"]
    assert [(r["table"], r["row"], r["status"]) for r in joined["support"]] == \
        [(r["table"], r["row"], r["status"]) for r in whole["support"]]
    assert joined["spec_coverage"] == whole["spec_coverage"]
    assert len(joined["invocation"]["groups"]) == 2
    for name in ("summary.md", "junit.xml", "spec-coverage.md"):
        assert (tmp_path / "joined" / name).is_file()
    junit = (tmp_path / "joined" / "junit.xml").read_text()
    assert junit.count("<testcase ") == len(whole["tests"])


@pytest.mark.slow
def test_a_test_reported_by_two_groups_is_refused(runs):
    g1 = merge.load(runs["g1"])
    with pytest.raises(merge.MergeError, match=r"ran in two groups"):
        merge.merge([g1, g1])


def test_a_group_without_its_summary_is_named(tmp_path):
    with pytest.raises(merge.MergeError, match=r"no summary\.json.*reach its end"):
        merge.load(tmp_path / "missing")
