"""The adapter scaffold (``python -m conformance new-adapter``): what it writes, what it refuses, and
that its output runs the whole suite green-or-skipped (slow lane)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conformance import CAPABILITIES, Implementation, NotSupported
from conformance.scaffold import ScaffoldError, render, write

ROOT = Path(__file__).resolve().parents[2]


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _env(*paths: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONFORMANCE_", "PYTEST_XDIST_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *map(str, paths)])
    return env


def test_the_scaffold_has_the_core_and_every_group_skipping_with_a_reason(tmp_path):
    path = write("demo_adapter", "aot_eager", tmp_path)
    impl = _load(path).make()
    assert isinstance(impl, Implementation) and impl.name == "demo_adapter"
    assert impl.versions()["torch"]
    compiled = impl.compile(lambda x: x * 2 + 1)
    import torch

    assert compiled(torch.ones(3)).tolist() == [3.0, 3.0, 3.0]
    for group in CAPABILITIES:
        with pytest.raises(NotSupported, match=f"demo_adapter does not provide {group}"):
            getattr(impl, group)()
    with pytest.raises(NotSupported, match="no StableHLO"):
        impl.lower(lambda x: x, [])
    source = path.read_text()
    for group, cap in CAPABILITIES.items():  # each group's outline names every member
        assert all(member in source for member in cap.required + cap.optional), group


def test_the_scaffold_refuses_a_bad_name_a_bad_backend_and_an_existing_file(tmp_path):
    with pytest.raises(ScaffoldError, match="'my-adapter' must be a Python identifier"):
        render("my-adapter", "aot_eager")
    with pytest.raises(ScaffoldError, match="--backend"):
        render("ok", "two words")
    write("taken", "aot_eager", tmp_path)
    (tmp_path / "taken.py").write_text("# mine\n")
    with pytest.raises(ScaffoldError, match="taken.py exists"):
        write("taken", "inductor", tmp_path)
    assert (tmp_path / "taken.py").read_text() == "# mine\n"
    assert "'inductor'" in write("taken", "inductor", tmp_path, force=True).read_text()


def test_the_command_writes_the_module_in_the_current_directory(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "conformance", "new-adapter", "cli_adapter", "--backend", "inductor"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "--conformance-impl cli_adapter:make" in run.stdout
    assert "BACKEND = 'inductor'" in (tmp_path / "cli_adapter.py").read_text()
    again = subprocess.run(
        [sys.executable, "-m", "conformance", "new-adapter", "cli_adapter"], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 2 and "exists" in again.stderr


@pytest.mark.slow
def test_the_scaffold_runs_the_whole_suite_with_no_failure_and_no_error(tmp_path):
    # A team's first run: the written module, unchanged, over aot_eager, from another directory.
    write("first_run", "aot_eager", tmp_path)
    junit = tmp_path / "junit.xml"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "conformance", "--conformance-impl", "first_run:make", "-n", "2",
         "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", "--conformance-report-dir", str(tmp_path / "reports")],
        cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=1800,
    )
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    # aot_eager runs every graph's ops as ATen kernels, and the suite's observer says so: those
    # tests end 'fell back: ran eagerly (...)' (a failure to pytest), the truth about the backend,
    # not a fault of the scaffold; nothing else may fail
    [summary] = (tmp_path / "reports").glob("*/default/summary.json")
    tests = json.loads(summary.read_text())["tests"]
    eager = [t for t in tests if t["outcome"] == "fell back" and "fell back: ran eagerly" in t["message"]]
    bad = {t["id"]: t["message"][:200] for t in tests if t["outcome"] in ("failed", "error", "fell back", "xpassed") and t not in eager}
    assert not bad and counts["errors"] == 0 and counts["failures"] == len(eager), run.stdout[-4000:]
    assert counts["tests"] > counts["skipped"] > 0, counts  # some ran for real, the groups skipped
    assert run.returncode == (1 if eager else 0), run.stdout[-2000:]
