"""The suite installed on its own (``make suite-alone``): run it as a backend team would.

Run with the interpreter of an environment that has the suite's dependencies and nothing of the
reference's compiler stack. Checks that torch-mlir and IREE are not importable there, then runs
``pytest --pyargs conformance`` from a scratch directory against torch's ``aot_eager`` through the
suite's built-in adapter, and fails unless the run has tests that passed and none that failed or
errored. Reports go to ``reports/suite-alone/`` of this checkout.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ABSENT = ("torch_mlir", "iree.compiler", "iree.runtime")
IMPL = "conformance.adapters.torch_builtin:aot_eager"


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--jobs", default="auto", help="pytest-xdist workers")
    parser.add_argument("--impl", default=IMPL, help=f"implementation spec (default {IMPL})")
    args = parser.parse_args(argv)

    present = [name for name in ABSENT if _importable(name)]
    if present:
        print(f"suite-alone: {', '.join(present)} importable in {sys.prefix}; the suite's own environment must not "
              "have the reference's compiler stack (install the suite without the 'reference' extra)")
        return 1
    out = ROOT / "reports" / "suite-alone"
    with tempfile.TemporaryDirectory(prefix="suite-alone-") as scratch:
        cmd = [sys.executable, "-m", "pytest", "--pyargs", "conformance", "--conformance-impl", args.impl,
               "--conformance-report-dir", str(out), "-n", args.jobs, "-p", "no:cacheprovider", "-q"]
        print("suite-alone: " + " ".join(cmd[1:]) + f"  (in {scratch})", flush=True)
        code = subprocess.run(cmd, cwd=scratch).returncode
    impl_name = args.impl.rsplit(":", 1)[1]
    summaries = sorted(out.glob("*/default/summary.json"))
    if not summaries:
        print(f"suite-alone: pytest exited {code} without a summary under {out}")
        return 1
    totals = json.loads(summaries[-1].read_text())["totals"]
    shown = ", ".join(f"{v} {k}" for k, v in totals.items() if v)
    print(f"suite-alone: {impl_name}: {shown} (pytest exit {code}); {summaries[-1].relative_to(ROOT)}")
    if totals.get("failed") or totals.get("error") or totals.get("errors") or not totals.get("passed"):
        return 1
    return 0 if code in (0, 1) and not totals.get("failed") else 1


if __name__ == "__main__":
    sys.exit(main())
