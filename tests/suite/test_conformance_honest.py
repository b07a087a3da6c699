"""An honest answer is never a failure: the whole suite against three adapters that answer honestly.

The adapters (``conformance/selfcheck/honest.py``) compile with torch's ``aot_eager``, so the runs
stay cheap: one raises ``NotSupported`` from every method outside the core, one answers every
optional question with an empty answer (``{}``, ``[]``, a helper API without symbols), one answers
some questions and not others. Each runs the whole suite (the package ``conformance.tests``, as
pytest collects it, so a module added later is in the run without anyone listing it) in a pytest
process of its own, as an outside team would, and must end with 0 failed and 0 errors; every test
either passes (what ``aot_eager`` really does), skips with a reason, or is a known failure of
``aot_eager`` listed with its reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import conformance

REPO = Path(conformance.__file__).resolve().parent.parent
SUITE = REPO / "conformance" / "tests"


def _run(tmp_path: Path, spec: str) -> tuple[subprocess.CompletedProcess, dict]:
    dropped = ("CONFORMANCE_", "PYTEST_XDIST", "TORCH_NEURONX_", "NEURON_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env["PYTHONPATH"] = str(REPO)
    # -p honest: a test body that catches a refusal of not_supported and passes anyway fails.
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "conformance.selfcheck.honest",
           "-o", "addopts=", "-q",
           "--conformance-impl", spec, "--conformance-report-dir", str(tmp_path / "reports"),
           "--conformance-snapshot-dir", str(tmp_path / "snapshots"), "--pyargs", "conformance.tests"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    name = spec.rsplit(":", 1)[1].replace("_", "-")
    summary = json.loads((tmp_path / "reports" / f"honest-{name}" / "default" / "summary.json").read_text())
    return proc, summary


@pytest.mark.slow
@pytest.mark.parametrize("factory", ["not_supported", "empty", "partial"])
def test_an_honest_adapter_gets_no_failure_and_no_error(tmp_path, factory):
    proc, summary = _run(tmp_path, f"conformance.selfcheck.honest:{factory}")
    # aot_eager runs every graph's ops as ATen kernels, and the suite's observer says so: a parity
    # test ends 'fell back: ran eagerly (...)', which is the truth about the backend, not a failure
    # of an honest answer; any other fallback is.
    ran_eagerly = {t["id"] for t in summary["tests"] if t["outcome"] == "fell back" and "fell back: ran eagerly" in t["message"]}
    bad = {t["id"]: t["message"][:300] for t in summary["tests"]
           if t["outcome"] in ("failed", "error", "fell back", "xpassed") and t["id"] not in ran_eagerly}
    assert not bad, f"{factory}: {json.dumps(bad, indent=1)}\n{proc.stdout[-3000:]}"
    assert proc.returncode in ((1,) if ran_eagerly else (0,)), proc.stdout[-3000:] + proc.stderr[-2000:]
    # Every module of the suite took part (one that failed to import, or collected nothing, did not).
    ran = {t["id"].split("::")[0] for t in summary["tests"]}
    modules = {p.name for p in SUITE.glob("test_*.py")}
    assert len(modules) >= 20 and modules <= ran, f"modules with no test in the run: {sorted(modules - ran)}"
    skipped = [t for t in summary["tests"] if t["outcome"] == "skipped"]
    assert skipped and all(t["message"] for t in skipped), "every skip carries its reason"
    carried = {t["id"].split("::")[0] for t in summary["tests"] if t["outcome"] == "passed" or t["id"] in ran_eagerly}
    assert "test_eager_parity.py" in carried, "the core (compile) carries the parity tests for every adapter"
    rows = {r["row"]: r for r in summary["support"]}
    skips = {t["id"]: t["message"] for t in summary["tests"] if t["outcome"] == "skipped"}
    if factory == "not_supported":
        # Nothing outside the core passes: a test that met a refusal in its body and passed failed
        # above (-p honest), and every support row reads Unsupported with the refusal.
        assert {r["status"] for r in rows.values()} == {"Unsupported"}, {r["row"]: r["status"] for r in rows.values()}
    elif factory == "empty":
        assert rows["NEURON_CC_FLAGS"]["status"] == "Unsupported"
        assert "does not read NEURON_CC_FLAGS" in rows["NEURON_CC_FLAGS"]["notes"]
    else:
        # What it answers is probed for real; what it lacks skips naming it, even beside an answer
        # the same test got (a variable it reads, a helper symbol it has).
        assert rows["get_rank()"]["status"] == "Supported", rows["get_rank()"]
        assert "does not read NEURON_CC_FLAGS" not in rows["NEURON_CC_FLAGS"]["notes"], rows["NEURON_CC_FLAGS"]
        assert "does not read TORCH_NEURONX_DEBUG_DIR" in rows["TORCH_NEURONX_DEBUG_DIR"]["notes"]
        assert "has no 'no_lowering'" in rows["Operations with no lowering"]["notes"], "an empty entry is none"
    custom = {i: m for i, m in skips.items() if i.startswith("test_custom_ops.py") and "breaks" in i}
    assert custom and all("forced_graph_breaks" in m for m in custom.values()), custom


def test_a_test_that_passes_after_a_refusal_fails_under_the_honest_plugin(tmp_path):
    # The watch the whole-suite runs rely on, on a planted module: a refusal caught in a test body
    # and then passed over fails; a refusal let through is a skip; a test of the core passes.
    (tmp_path / "test_planted.py").write_text(
        "from conformance.harness.implementation import NotSupported\n"
        "from conformance.selfcheck.honest import not_supported\n\n"
        "def test_swallows():\n"
        "    try:\n"
        "        not_supported().backend().forced_graph_breaks()\n"
        "    except NotSupported:\n"
        "        pass  # carries on as if it had the answer\n\n"
        "def test_lets_it_through():\n"
        "    not_supported().backend().forced_graph_breaks()\n\n"
        "def test_core():\n"
        "    assert not_supported().name == 'honest-not-supported'\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONFORMANCE_", "PYTEST_XDIST"))}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "conformance.selfcheck.honest",
         "-o", "addopts=", "-q", "-rfs", "--conformance-impl", "conformance.selfcheck.honest:not_supported",
         "--conformance-report-dir", str(tmp_path / "reports"), "test_planted.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout
    assert "1 failed, 1 passed, 1 skipped" in out, out + proc.stderr
    assert "FAILED test_planted.py::test_swallows" in out, out
    assert ("passed although the adapter refused BackendCapability.forced_graph_breaks: a refusal is a skip, "
            "never a pass") in out, out
