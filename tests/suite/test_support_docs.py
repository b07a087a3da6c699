"""conformance.reporting.support_docs: the checked-in support matrices against fresh runs.

The probe runs themselves are faked here (``generate`` is replaced by a function returning a fixed
text), except in the test of a probe run that cannot start, which starts a real child pytest;
``make support-drift`` runs the real probes."""

from __future__ import annotations

from importlib import metadata

import pytest

from conformance.reporting import support_docs
from conformance.adapters import turbine
from conformance.reporting.support_docs import Target


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "docs" / "support").mkdir(parents=True)
    fresh = {"alpha": "# Support matrix: alpha\n| `model` | Supported | ok |\n"}
    targets = (Target("alpha", "pkg.mod:alpha"), Target("beta", "pkg.mod:beta", lambda: "beta's extra is not installed"))
    monkeypatch.setattr(support_docs, "TARGETS", targets)
    monkeypatch.setattr(support_docs, "generate", lambda target, root, jobs, as_other_machine=False: fresh[target.name])
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


def test_from_report_compares_a_finished_runs_matrix_and_runs_nothing(project, capsys, monkeypatch):
    root, fresh = project
    monkeypatch.setattr(support_docs, "generate", lambda *a, **k: pytest.fail("--from-report ran the probes"))
    reports = root / "reports"
    (reports / "alpha" / "default").mkdir(parents=True)
    (reports / "alpha" / "default" / "support.md").write_text("# Support matrix: alpha\nMachine: host `x`, cores `2`\n")
    doc = root / "docs/support/alpha.md"
    doc.write_text(support_docs.checked_in_text("alpha", "# Support matrix: alpha\n"))
    assert support_docs.main(["--check", "--from-report", str(reports), "--only", "alpha", "--root", str(root)]) == 0
    assert "alpha.md matches" in capsys.readouterr().out

    doc.write_text(fresh["alpha"])
    assert support_docs.main(["--check", "--from-report", str(reports), "--only", "alpha", "--root", str(root)]) == 1
    assert "drift in docs/support/alpha.md" in capsys.readouterr().out

    missing = root / "elsewhere"
    assert support_docs.main(["--check", "--from-report", str(missing), "--only", "alpha", "--root", str(root)]) == 2
    assert f"{missing / 'alpha' / 'default' / 'support.md'} does not exist: run the suite's default lane" in capsys.readouterr().err

    with pytest.raises(SystemExit) as info:
        support_docs.main(["--check", "--from-report", str(reports), "--as-other-machine", "--root", str(root)])
    assert info.value.code == 2
    assert "cannot run them as another machine" in capsys.readouterr().err


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


# --- nothing checked in depends on the machine that made it ------------------------------------


def test_the_checked_in_text_keeps_the_versions_and_drops_the_machine_line():
    from conformance.reporting import support

    matrix = support.render("impl", {"torch": "2.13.0"}, [], machine={"host": "x86_64:Some CPU", "cores": "2"})
    assert "Machine: host `x86_64:Some CPU`, cores `2`" in matrix
    kept = support_docs.checked_in_text("impl", matrix)
    assert kept.startswith("<!-- Generated from reports/impl/default/support.md")
    assert "Versions: torch `2.13.0`" in kept
    assert "Some CPU" not in kept and "Machine:" not in kept


def test_paths_of_this_machine_and_user_read_as_a_user_would_write_them(tmp_path, monkeypatch):
    import os
    import tempfile

    from conformance.reporting.support import portable

    other = tmp_path / "tmp"
    other.mkdir()
    monkeypatch.setenv("TMPDIR", str(other))
    monkeypatch.setattr(tempfile, "tempdir", None)
    uid = os.getuid()
    note = f"default '{other}/neff_cache'; debug {other}/neuron-{uid}/debug; keep model_default-{uid} and /tmpfoo"
    assert portable(note) == f"default '$TMPDIR/neff_cache'; debug $TMPDIR/neuron-<uid>/debug; keep model_default-{uid} and /tmpfoo"
    assert portable(os.path.expanduser("~") + "/.cache/neuron") == "~/.cache/neuron"


def test_the_other_machine_run_changes_the_host_the_cores_and_the_folders(tmp_path):
    env, hook = support_docs._other_machine(str(tmp_path))
    assert env["NEURON_REFERENCE_HOST_IDENTITY"] == support_docs.OTHER_HOST
    assert env["TMPDIR"].startswith(str(tmp_path)) and env["XDG_CACHE_HOME"].startswith(str(tmp_path))
    import os
    import subprocess
    import sys

    # the hook pins the child to one core: a real child reports one core in its affinity
    out = subprocess.run([sys.executable, "-c", "import os; print(len(os.sched_getaffinity(0)))"],
                         capture_output=True, text=True, preexec_fn=hook, check=True).stdout
    assert out.strip() == "1"


def test_the_reference_reports_its_host_as_a_machine_fact_not_a_version(monkeypatch):
    from conformance.adapters.reference import make

    from reference.cache.key import tool_versions

    monkeypatch.setenv("NEURON_REFERENCE_HOST_IDENTITY", "x86_64:another CPU")
    tool_versions.cache_clear()  # read once per process: a process started with the variable set
    try:
        impl = make()
        assert "host" not in impl.versions()
        assert impl.machine()["host"] == "x86_64:another CPU"
        assert tool_versions()["host"] == "x86_64:another CPU", "the override must reach the cache key's tool versions"
    finally:
        monkeypatch.delenv("NEURON_REFERENCE_HOST_IDENTITY")
        tool_versions.cache_clear()
