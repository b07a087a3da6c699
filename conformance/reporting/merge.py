"""One lane's reports from the reports of its groups.

When CI runs a lane as K groups (``pytest --splits K --group i``, :mod:`pytest_split`), each group
writes a complete ``<impl>/<lane>/`` folder for the tests it ran. This joins those folders into the
folder one unsplit run would have written: the tests of every group (a test reported by two groups
is an error: the split ran it twice), totals and contracts counted again, the support rows merged
by the same rule as the probes of one run, the compile times together, the stale expectation
entries judged against every group's tests, and the spec coverage, ``summary.md``, ``junit.xml``
and ``support.md`` made again from the joined summary.

    python -m conformance.reporting.merge --out reports/reference/default GROUP_DIR [GROUP_DIR ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from conformance.reporting import report, support as _support


class MergeError(ValueError):
    """The groups' reports cannot be one lane's: they disagree on the implementation or the lane,
    a test ran in two groups, or a folder has no summary."""


def load(folder: Path) -> dict:
    path = Path(folder) / "summary.json"
    if not path.is_file():
        raise MergeError(f"{path}: no summary.json; did this group's pytest run reach its end? "
                         "(its reports are written when the session finishes)")
    return json.loads(path.read_text(encoding="utf-8"))


def _stale(expectations: str | None, tests: dict[str, dict]) -> list[dict] | None:
    """Stale entries judged against all groups' tests; ``None`` when the file cannot be read here."""
    if not expectations or not Path(expectations).is_file():
        return None
    from conformance.harness import expectations as _expectations

    ran = {k for k, v in tests.items() if v.get("collected", True)}
    parsed = _expectations.parse(Path(expectations).read_text(encoding="utf-8"), expectations)
    return [{"id": e.nodeid, "reason": e.reason} for e in parsed.stale(ran)]


def merge(summaries: list[dict]) -> tuple[dict, list[dict], list[tuple[str, str]]]:
    """The joined summary, the support observations it was made from and their probe order."""
    if not summaries:
        raise MergeError("no group reports to merge")
    first = summaries[0]
    for s in summaries[1:]:
        for key in ("implementation", "lane", "schema_version"):
            if s[key] != first[key]:
                raise MergeError(f"the groups disagree on {key}: {first[key]!r} and {s[key]!r}")
    tests: dict[str, dict] = {}
    for group, s in enumerate(summaries, 1):
        for t in s["tests"]:
            entry = {k: v for k, v in t.items() if k != "id"}
            if t["id"] in tests:
                if not entry.get("collected", True) and not tests[t["id"]].get("collected", True):
                    continue  # a module skipped at collection is reported by every group that collected it
                raise MergeError(f"test {t['id']!r} ran in two groups (again in group {group}): "
                                 "the split must give each test to one group")
            tests[t["id"]] = entry
    observations, order = [], []
    for s in summaries:
        for row in s["support"]:
            observations.append({"table": row["table"], "item": row["row"], "status": row["status"],
                                 "notes": row["notes"], "evidence": row.get("evidence"), "declared": row.get("declared")})
            if (row["table"], row["row"]) not in order:
                order.append((row["table"], row["row"]))
    rows = _support.merge(observations)
    totals, contracts = report.tally(tests)
    stale = _stale(first["invocation"].get("expectations"), tests)
    if stale is None:  # the expectation file is not here: an entry is stale only if every group says so
        stale = [e for e in first["stale_expectations"]
                 if all(e in s["stale_expectations"] for s in summaries[1:])]
    merged = dict(first)
    merged.update({
        "invocation": {**first["invocation"], "groups": [s["invocation"]["args"] for s in summaries]},
        "started": min(s["started"] for s in summaries),
        "finished": max(s["finished"] for s in summaries),
        "wall_s": max(s["wall_s"] for s in summaries),
        "totals": totals,
        "contracts": contracts,
        "tests": [{"id": k, **v} for k, v in sorted(tests.items())],
        "support": [{"table": t, "row": r, "status": rows[(t, r)]["status"], "declared": rows[(t, r)].get("declared"),
                     "notes": rows[(t, r)]["notes"], "evidence": rows[(t, r)].get("evidence")} for t, r in order],
        "compile_times": sorted((x for s in summaries for x in s["compile_times"]), key=lambda x: -x["seconds"]),
        "stale_expectations": stale,
    })
    merged.pop("spec_coverage", None)
    return merged, observations, order


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.reporting.merge", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="the lane's report folder to write")
    parser.add_argument("groups", nargs="+", type=Path, help="each group's <impl>/<lane>/ report folder")
    args = parser.parse_args(argv)
    try:
        summary, observations, order = merge([load(g) for g in args.groups])
    except MergeError as exc:
        print(f"merge: {exc}", file=sys.stderr)
        return 2
    report.publish(args.out, summary, observations, order)
    t = summary["totals"]
    print(f"merge: {len(args.groups)} groups, {len(summary['tests'])} tests "
          f"({', '.join(f'{v} {k}' for k, v in t.items() if v)}) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
