"""The checked-in support matrices (``docs/support/<impl>.md``), made by fresh probe runs.

Each matrix is what the plugin writes to ``reports/<impl>/default/support.md`` after a run of the support
probes (``conformance/tests/test_backend_support.py``) against one implementation, with a header line
saying it is generated. This module runs those probes in a child ``pytest`` per implementation,
into a scratch report directory, and either rewrites the checked-in copies or compares them::

    python -m conformance.reporting.support_docs            # regenerate docs/support/*.md
    python -m conformance.reporting.support_docs --check    # print the diff and exit 1 on any drift
    python -m conformance.reporting.support_docs --check --as-other-machine   # the same, as another machine
    python -m conformance.reporting.support_docs --check --from-report reports  # a finished run's matrices

The checked-in copies hold nothing that depends on the machine that made them: the matrix's
``Machine:`` line (host CPU, cores) is left out, and ``--as-other-machine`` proves it by running the
probes as a different machine would (another reported host identity, one core, another temporary
directory and cache home) and comparing with copies made on this one. ``--from-report DIR`` runs
nothing: it compares with the matrices a finished run of the suite wrote under ``DIR/<impl>/default/``
(``make test`` checks the reference's this way, from its own session; ``make slow`` runs the probes
as another machine).

The rendering is the plugin's own; nothing here formats a matrix. An implementation whose
optional dependency is not installed is skipped with the reason (never compared, never deleted).
"""

from __future__ import annotations

import argparse
import difflib
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from conformance.adapters.turbine import turbine_available
from conformance.reporting.support import MACHINE_PREFIX

PROBES = "conformance/tests/test_backend_support.py"
HEADER = "<!-- Generated from reports/{name}/default/support.md by `make support-docs`; regenerate, do not edit. -->\n"

# pytest's exit statuses that still mean "the probes ran": 0 all passed, 1 some probe failed (its
# row then reads Unknown with the error, which is part of the matrix).
_RAN = (0, 1)


@dataclass(frozen=True)
class Target:
    name: str
    spec: str
    #: ``None`` when the implementation can run here, else why it cannot.
    unavailable: Callable[[], str | None] = lambda: None


TARGETS = (
    Target("reference", "conformance.adapters.reference:make"),
    Target("inductor", "conformance.adapters.torch_builtin:inductor"),
    Target("aot_eager", "conformance.adapters.torch_builtin:aot_eager"),
    Target("turbine_cpu", "conformance.adapters.turbine:turbine_cpu", turbine_available),
)


class ProbeRunError(RuntimeError):
    """The probe run of one implementation did not produce a support matrix."""


#: What ``--as-other-machine`` reports as the host (the reference keys artifacts on it).
OTHER_HOST = "x86_64:support-drift check, another CPU model"


def checked_in_text(name: str, matrix: str) -> str:
    """The checked-in form of a run's ``support.md``: the header, and no machine facts."""
    kept = [line for line in matrix.splitlines(True) if not line.startswith(MACHINE_PREFIX)]
    return HEADER.format(name=name) + "".join(kept)


def _other_machine(scratch: str) -> tuple[dict[str, str], Callable[[], None] | None]:
    """The environment and the start hook of a probe run that looks like another machine."""
    home = Path(scratch) / "other-machine"
    (home / "tmp").mkdir(parents=True)
    (home / "cache").mkdir()
    env = {"NEURON_REFERENCE_HOST_IDENTITY": OTHER_HOST, "TMPDIR": str(home / "tmp"), "XDG_CACHE_HOME": str(home / "cache")}
    try:
        one_core = {min(os.sched_getaffinity(0))}
    except (AttributeError, OSError):
        return env, None
    return env, lambda: os.sched_setaffinity(0, one_core)


def generate(target: Target, root: Path, jobs: str, *, as_other_machine: bool = False) -> str:
    """Run the probes against ``target`` in a child pytest; returns the checked-in text."""
    with tempfile.TemporaryDirectory(prefix=f"support-{target.name}-") as scratch:
        cmd = [
            sys.executable, "-m", "pytest", PROBES, "--conformance-impl", target.spec, "--conformance-report-dir", scratch,
            "-q", "-p", "no:cacheprovider", "-o", "addopts=", "-n", jobs,
        ]  # fmt: skip
        env, hook = dict(os.environ), None
        if as_other_machine:
            extra, hook = _other_machine(scratch)
            env.update(extra)
        proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, env=env, preexec_fn=hook)
        matrix = Path(scratch) / target.name / "default" / "support.md"
        if proc.returncode not in _RAN or not matrix.is_file():
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
            raise ProbeRunError(
                f"the support probes against {target.name} ({target.spec}) exited {proc.returncode} "
                f"without writing {matrix.name}; last output:\n{tail}"
            )
        return checked_in_text(target.name, matrix.read_text(encoding="utf-8"))


def from_report(target: Target, reports: Path) -> str:
    """The checked-in text of the matrix a finished run wrote under ``reports``."""
    matrix = reports / target.name / "default" / "support.md"
    if not matrix.is_file():
        raise ProbeRunError(
            f"{matrix} does not exist: run the suite's default lane against {target.name} first "
            f"(make test writes it), or drop --from-report to run the probes"
        )
    return checked_in_text(target.name, matrix.read_text(encoding="utf-8"))


def diff(old: str, new: str, path: str) -> str:
    """A unified diff from the checked-in text to the fresh one (empty when equal)."""
    return "".join(
        difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"{path} (checked in)", f"{path} (fresh run)")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.reporting.support_docs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare instead of rewriting; exit 1 on drift")
    parser.add_argument("--only", action="append", metavar="NAME", help="only these implementations (repeatable)")
    parser.add_argument("-n", "--jobs", default="2", help="pytest-xdist workers per probe run (default 2)")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="project root holding docs/support/")
    parser.add_argument(
        "--as-other-machine", action="store_true",
        help="run the probes as another machine would (another host identity, one core, another TMPDIR and cache home)",
    )
    parser.add_argument(
        "--from-report", type=Path, metavar="DIR",
        help="run nothing: take each matrix from a finished run's DIR/<impl>/default/support.md",
    )
    args = parser.parse_args(argv)
    if args.from_report and args.as_other_machine:
        parser.error("--from-report runs no probes, so it cannot run them as another machine; give one of the two")
    known = {t.name for t in TARGETS}
    unknown = sorted(set(args.only or ()) - known)
    if unknown:
        parser.error(f"unknown implementation(s) {unknown}; known: {sorted(known)}")

    drifted = []
    for target in TARGETS:
        if args.only and target.name not in args.only:
            continue
        reason = target.unavailable()
        if reason:
            print(f"support-docs: {target.name}: skipped, {reason}")
            continue
        path = args.root / "docs" / "support" / f"{target.name}.md"
        start = time.monotonic()
        try:
            if args.from_report:
                fresh = from_report(target, args.from_report)
            else:
                fresh = generate(target, args.root, args.jobs, as_other_machine=args.as_other_machine)
        except ProbeRunError as e:
            print(f"support-docs: {target.name}: {e}", file=sys.stderr)
            return 2
        took = (f"{args.from_report / target.name / 'default' / 'support.md'}, run earlier" if args.from_report
                else f"{time.monotonic() - start:.0f} s")
        rel = path.relative_to(args.root).as_posix()
        if not args.check:
            path.write_text(fresh, encoding="utf-8")
            print(f"support-docs: {target.name}: wrote {rel} ({took})")
            continue
        old = path.read_text(encoding="utf-8") if path.is_file() else ""
        delta = diff(old, fresh, rel)
        if delta:
            drifted.append(rel)
            print(f"support-docs: {target.name}: {rel} differs from a fresh run ({took}):\n{delta}")
        else:
            print(f"support-docs: {target.name}: {rel} matches a fresh run ({took})")
    if drifted:
        print(f"support-docs: drift in {', '.join(drifted)}; if the change is intended, run `make support-docs` and commit")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
