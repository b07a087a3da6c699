"""Assemble ``reports/selfcheck.md`` from the per-mutant results ``tests/suite/test_selfcheck.py`` wrote.

``python -m conformance.selfcheck.report [RESULTS_DIR] [OUT]`` (defaults: ``reports/selfcheck``
and ``reports/selfcheck.md``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

CONTROL = "_control"


def load(results_dir: Path) -> tuple[list[dict], dict | None]:
    records = [json.loads(p.read_text()) for p in sorted(results_dir.glob("*.json"))]
    control = next((r for r in records if r["mutant"] == CONTROL), None)
    return [r for r in records if r["mutant"] != CONTROL], control


def render(mutants: list[dict], control: dict | None) -> str:
    killed = [m for m in mutants if m["killed"]]
    lines = ["# Selfcheck: does the suite catch broken implementations?", ""]
    if mutants:
        lines.append(f"Kill rate: **{len(killed)}/{len(mutants)}** ({100 * len(killed) / len(mutants):.0f} %) of the "
                     "mutants in `conformance/selfcheck/mutants.py` made a conformance test fail for the stated reason.")
    else:
        lines.append("No mutant was run.")
    if control is not None:
        verdict = "passed" if control["rc"] == 0 and not control["failed"] else f"FAILED ({', '.join(control['failed'])})"
        lines.append(f"The unmutated reference over the same tests: {verdict} ({control['wall_s']:.0f} s wall, "
                     f"{control['cpu_s']:.0f} s CPU).")
    lines += ["", "| mutant | contract | what it breaks | caught by | wall s | CPU s |", "|---|---|---|---|---|---|"]
    for m in sorted(mutants, key=lambda m: (m["contract"], m["mutant"])):
        caught = "<br>".join(f"`{t}`" for t in m["caught_by"]) if m["killed"] else f"**survived** ({m['why']})"
        lines.append(f"| `{m['mutant']}` | {m['contract']} | {m['breaks']} | {caught} | {m['wall_s']:.0f} | {m['cpu_s']:.0f} |")
    total_cpu = sum(m["cpu_s"] for m in mutants)
    lines += ["", f"Each mutant's pytest run (`-n 0`): wall seconds depend on the machine's load; CPU seconds (the run "
              f"and its child processes) do not, and add up to {total_cpu:.0f} s for all mutants, about "
              f"{total_cpu / 2:.0f} s of wall time at `-n 2` on an idle two-core machine."]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    results_dir = Path(argv[0]) if argv else Path("reports/selfcheck")
    out = Path(argv[1]) if len(argv) > 1 else Path("reports/selfcheck.md")
    mutants, control = load(results_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(mutants, control))
    print(f"wrote {out}: {sum(m['killed'] for m in mutants)}/{len(mutants)} mutants killed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
