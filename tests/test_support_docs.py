"""conformance.support_docs: the checked-in support matrices against fresh runs.

The probe runs themselves are faked here (``generate`` is replaced by a function returning a fixed
text), except in the test of a probe run that cannot start, which starts a real child pytest;
``make support-drift`` runs the real probes."""

from __future__ import annotations

from importlib import metadata

import pytest

from conformance import support_docs
from conformance.adapters import turbine
from conformance.support_docs import Target


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "docs" / "support").mkdir(parents=True)
    fresh = {"alpha": "# Support matrix: alpha\n| `model` | Supported | ok |\n"}
    targets = (Target("alpha", "pkg.mod:alpha"), Target("beta", "pkg.mod:beta", lambda: "beta's extra is not installed"))
    monkeypatch.setattr(support_docs, "TARGETS", targets)
    monkeypatch.setattr(support_docs, "generate", lambda target, root, jobs: fresh[target.name])
    return tmp_path, fresh


def test_regenerating_writes_the_fresh_matrix_and_skips_an_unavailable_implementation(project, capsys):
    root, fresh = project
    assert support_docs.main(["--root", str(root)]) == 0
    assert (root / "docs/support/alpha.md").read_text() == fresh["alpha"]
    assert not (root / "docs/support/beta.md").exists()
    assert "beta: skipped, beta's extra is not installed" in capsys.readouterr().out


def test_check_passes_on_equal_text_and_fails_with_the_diff_on_drift(project, capsys):
    root, fresh = project
    doc = root / "docs/support/alpha.md"
    doc.write_text(fresh["alpha"])
    assert support_docs.main(["--check", "--root", str(root)]) == 0
    assert "alpha.md matches a fresh run" in capsys.readouterr().out

    doc.write_text(fresh["alpha"].replace("Supported", "Partial"))
    assert support_docs.main(["--check", "--root", str(root)]) == 1
    out = capsys.readouterr().out
    assert "-| `model` | Partial | ok |" in out and "+| `model` | Supported | ok |" in out
    assert "drift in docs/support/alpha.md" in out
    assert doc.read_text() != fresh["alpha"], "--check must not rewrite the checked-in matrix"


def test_a_missing_checked_in_matrix_is_a_drift(project, capsys):
    root, _ = project
    assert support_docs.main(["--check", "--root", str(root)]) == 1
    assert "+# Support matrix: alpha" in capsys.readouterr().out


def test_an_unknown_implementation_name_is_a_usage_error(project, capsys):
    root, _ = project
    with pytest.raises(SystemExit) as info:
        support_docs.main(["--only", "gamma", "--root", str(root)])
    assert info.value.code == 2
    assert "unknown implementation(s) ['gamma']" in capsys.readouterr().err


def test_a_probe_run_that_cannot_start_names_the_implementation(tmp_path):
    root = support_docs.Path(support_docs.__file__).resolve().parent.parent
    bad = Target("ghost", "conformance.adapters.no_such_module:make")
    with pytest.raises(support_docs.ProbeRunError, match=r"against ghost \(conformance.adapters.no_such_module:make\) exited"):
        support_docs.generate(bad, root, "0")


def test_without_iree_turbine_the_turbine_target_is_unavailable_naming_the_extra(monkeypatch):
    def missing(dist):
        raise metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(turbine.metadata, "version", missing)
    target = {t.name: t for t in support_docs.TARGETS}["turbine_cpu"]
    assert "install the project's 'turbine' extra" in target.unavailable()
    with pytest.raises(RuntimeError, match="turbine_cpu: iree-turbine is not installed"):
        turbine.turbine_cpu()
