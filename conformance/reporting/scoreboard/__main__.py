"""``python -m conformance.reporting.scoreboard``: build ``reports/scoreboard/index.html``.

::

    python -m conformance.reporting.scoreboard                     # docs/support/ and reports/*/*/summary.json
    python -m conformance.reporting.scoreboard --history DIR       # and earlier runs' summary.json files
    python -m conformance.reporting.scoreboard --reports reports --reports reports/suite-alone

Runs nothing: it reads the checked-in tables and whatever reports are on disk. Each input it leaves
out (malformed, or not a conformance report) is named on stderr with the reason.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from conformance.reporting.scoreboard import sources

_ROOT = Path(__file__).resolve().parents[3]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.reporting.scoreboard", description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=Path, default=_ROOT / "docs" / "support", help="the checked-in tables (docs/support/)")
    parser.add_argument("--reports", type=Path, action="append", default=None,
                        help="read <impl>/<lane>/summary.json below it (repeatable; default reports/)")
    parser.add_argument("--history", type=Path, default=None, help="a directory of earlier runs' summary.json files")
    parser.add_argument("--out", type=Path, default=Path("reports") / "scoreboard", help="where index.html is written")
    args = parser.parse_args(argv)
    try:
        # Jinja2 is the scoreboard extra's, not the suite's: a suite installed alone lacks it
        from conformance.reporting.scoreboard import page
    except ModuleNotFoundError as exc:
        if exc.name not in ("jinja2", "markupsafe"):
            raise
        print(f"scoreboard: {exc.name} is not installed; install the scoreboard extra "
              "(pip install 'neuron-conformance[scoreboard]') or use `make scoreboard`", file=sys.stderr)
        return 2
    start = time.perf_counter()
    try:
        inputs = sources.read(args.docs, args.reports or [Path("reports")], args.history)
    except sources.ScoreboardInputError as exc:
        print(f"scoreboard: {exc}", file=sys.stderr)
        return 2
    for path, why in inputs.skipped:
        print(f"scoreboard: warning: skipped {path}: {why}", file=sys.stderr)
    data = page.shape(inputs)
    index = page.write(args.out, data)
    print(f"scoreboard: {index} ({index.stat().st_size // 1024} KiB): {len(data['impls'])} implementations, "
          f"{len(data['ops']['entries'])} op entries, {len(data['runs'])} run(s), {len(inputs.history)} earlier run(s), "
          f"{len(inputs.skipped)} input(s) skipped; {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
