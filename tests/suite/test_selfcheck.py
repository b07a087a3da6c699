"""The selfcheck lane: each deliberately broken implementation is caught, for the right reason.

For every mutant in :mod:`conformance.selfcheck.mutants`, a pytest process of its own (forked from
a server that has imported torch, :mod:`conformance.harness.forkserver`, so each run skips that import) runs
the conformance tests named for it against the mutant (``--conformance-impl conformance.selfcheck.mutants:<name>``); at least
one must fail with a failure text (read from the run's JUnit XML) matching the mutant's pattern.
Each case writes ``reports/selfcheck/<mutant>.json``; ``python -m conformance.selfcheck.report``
turns them into ``reports/selfcheck.md``.

The five mutants of :data:`HEAVY` are marked slow: ``make slow`` runs them, ``make test`` the rest;
``make selfcheck`` runs every one. The per-statement mutants (registered outside ``mutants.py``, in
``mutants_statements.py`` and ``mutants_atom.py``; the catalogue's ``mutants = [...]`` names them)
are marked ``slow`` and ``statement_mutant``: ``make slow`` and ``make selfcheck`` run them, and
``make selfcheck-statements`` runs them alone.

With ``SELFCHECK_CONTROL=1`` (``make selfcheck``) one more case runs every named test against the
unmutated reference and requires them all to pass, so a kill cannot come from a test that fails
anyway. (``make test`` runs those tests against the reference in the suite itself.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conformance.harness.env import COVERAGE_PREFIXES
from conformance.harness.forkserver import ForkServer
from conformance.selfcheck.mutants import MUTANTS
from conformance.selfcheck.report import CONTROL

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "reports" / "selfcheck"
RUN_TIMEOUT_S = 600
PRELOAD = ("torch", "torch._dynamo", "torch_mlir.fx", "iree._runtime.libs._runtime", "iree.compiler.tools.binaries")
# Variables that would point a run at another run's caches or implementation, or measure its
# coverage: a run against a broken implementation is no evidence that the real code is tested
# (pyproject.toml's [tool.coverage.run]), and unmeasured it takes about a quarter less time.
_STRIP = ("CONFORMANCE_", "TORCH_NEURONX_", "NEURON_", "PYTEST_XDIST_", "HYPOTHESIS_", *COVERAGE_PREFIXES)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_STRIP)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


@pytest.fixture(scope="module")
def server():
    """The fork server the runs start from. It imports torch, Dynamo and the third-party compiler
    stack below the reference (torch-mlir's importer, IREE's native runtime and tool finder, which
    every run loads and which read nothing at import: about 1.5 s of each run). Not pytest's plugins
    nor the suite, whose modules pytest must import itself to rewrite their asserts, and not the
    implementation, which a mutant patches."""
    with ForkServer(PRELOAD, env=_env()) as srv:
        yield srv


def _run(server: ForkServer, spec: str | None, tests: list[str], tmp_path: Path) -> dict:
    junit = tmp_path / "junit.xml"
    args = [*tests, "-n", "0", "-p", "no:cacheprovider", "-q", "-o", "addopts=",
            f"--junitxml={junit}", "--conformance-report-dir", str(tmp_path / "reports")]
    if spec:
        args += ["--conformance-impl", spec]
    log = tmp_path / "run.log"
    start = time.monotonic()
    proc = server.spawn("pytest", args, env=_env(), log=str(log), cwd=str(ROOT))
    try:
        proc.wait(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"the pytest run did not end within {RUN_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")
    # the run's CPU time and that of the processes it waited for: a load-independent measure of its cost
    wall, cpu = time.monotonic() - start, proc.cpu_s
    failed: dict[str, str] = {}
    ran = 0
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            bad = [c for c in case if c.tag in ("failure", "error")]
            if not [c for c in case if c.tag == "skipped"]:
                ran += 1
            if bad:
                failed[name] = "\n".join(f"{c.get('message', '')}\n{c.text or ''}" for c in bad)
    return {"rc": proc.returncode, "failed": failed, "ran": ran, "wall_s": wall, "cpu_s": cpu,
            "tail": log.read_text(errors="replace")[-3000:]}


def _write(record: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{record['mutant']}.json").write_text(json.dumps(record, indent=1))


#: The mutants whose runs cost the most, 8 to 15 s of a core each (a retry waiting out the lock
#: timeout, damaged and cut-short cache entries rebuilt in fresh processes, a second lowering, a
#: warm cache built to miss, a precompiled function loaded in a fresh process): `make slow` runs
#: them, `make test` the other 38, `make selfcheck` all.
HEAVY = frozenset({"lock_kept_after_a_failed_compile", "cache_executes_a_damaged_entry", "publication_not_atomic",
                   "hlo_key_ignores_the_pass_pipeline", "assert_cache_hit_ignored", "precompiled_graph_forgets_its_input_writes"})


def _statement_mutant(name: str) -> bool:
    return MUTANTS[name].module != "conformance.selfcheck.mutants"


def _param(name: str):
    if _statement_mutant(name):
        return pytest.param(name, marks=(pytest.mark.slow, pytest.mark.statement_mutant))
    return pytest.param(name, marks=pytest.mark.slow) if name in HEAVY else name


def test_the_heavy_mutants_are_mutants():
    """A renamed mutant does not drop out of make slow's run unnoticed."""
    assert HEAVY <= set(MUTANTS), f"not in conformance/selfcheck/mutants.py: {sorted(HEAVY - set(MUTANTS))}"


@pytest.mark.parametrize("name", [_param(n) for n in sorted(MUTANTS)])
def test_the_suite_catches_the_mutant(name, server, tmp_path):
    mutant = MUTANTS[name]
    run = _run(server, f"conformance.selfcheck.mutants:{name}", list(mutant.tests), tmp_path)
    caught = mutant.catches(run["failed"])
    why = ("" if caught else
           "no test ran" if not run["ran"] else
           "every selected test passed" if not run["failed"] else
           "tests failed, but not as expected: " + "; ".join(f"{t} (not /{'/ or /'.join(mutant.patterns_for(t))}/)"
                                                            for t in sorted(run["failed"])))
    _write({"mutant": name, "contract": mutant.contract, "breaks": mutant.breaks, "tests": list(mutant.tests),
            "killed": bool(caught), "caught_by": caught, "why": why, "rc": run["rc"], "wall_s": run["wall_s"], "cpu_s": run["cpu_s"],
            "failed": sorted(run["failed"])})
    assert caught, f"mutant {name} ({mutant.breaks}) survived: {why}\n{run['tail']}"


def test_a_kill_is_any_expected_failure_whichever_happens_first():
    """A mutant with several expected failures is caught by any of them, in any order, and only by
    a failure its own test's pattern describes."""
    from conformance.selfcheck.mutants import Mutant

    m = Mutant("m", "c", "b", ("a.py::t1[x]", "a.py::t2"), {"[x]": ("wrong numbers", "crashed"), "a.py::t2": "DID NOT RAISE"},
               patch=lambda: None)
    assert m.catches({"a::t1[x]": "child crashed"}) == ["a::t1[x]"]
    assert m.catches({"a::t2": "boom", "a::t1[x]": "wrong numbers here"}) == ["a::t1[x]"]
    assert m.catches({"a::t1[x]": "DID NOT RAISE"}) == []  # t2's reason is not t1's
    assert Mutant("n", "c", "b", ("t",), ("one", "two"), patch=lambda: None).catches({"t": "two"}) == ["t"]


@pytest.mark.skipif(os.environ.get("SELFCHECK_CONTROL") != "1", reason="the control run is make selfcheck's (SELFCHECK_CONTROL=1)")
def test_the_unmutated_reference_passes_the_same_tests(server, tmp_path):
    tests = sorted({t for m in MUTANTS.values() for t in m.tests})
    run = _run(server, None, tests, tmp_path)
    _write({"mutant": CONTROL, "rc": run["rc"], "failed": sorted(run["failed"]), "wall_s": run["wall_s"], "cpu_s": run["cpu_s"],
            "ran": run["ran"]})
    assert run["rc"] == 0 and not run["failed"], f"the reference fails tests the mutants are judged by:\n{run['tail']}"
    assert run["ran"] == len(tests), f"only {run['ran']} of {len(tests)} tests ran (the rest skipped)"


_APPLY_ALL = """
from conformance.selfcheck.mutants import MUTANTS
for name, mutant in MUTANTS.items():
    try:
        mutant.patch()
    except Exception as exc:
        print(f"{name} ({mutant.module}): {type(exc).__name__}: {exc}")
"""


def test_every_mutants_patch_applies_to_the_reference_as_it_is_now():
    """Each mutant patches a name of the reference; when the reference moves that name, the patch
    raises (the registry refuses to set a name a module lacks) or, worse, patches nothing and
    the mutant is reported as surviving. Every patch is applied in one child process (cheap
    next to running any mutant's tests), so a rename shows up in ``make test``, not only in the
    slow lane that runs the per-statement mutants."""
    run = subprocess.run([sys.executable, "-c", _APPLY_ALL], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "", "mutants whose patch no longer applies:\n" + run.stdout
