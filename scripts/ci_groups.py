"""The groups CI runs `make test`'s pytest part in, as pytest-split makes them, checked.

The workflow (.github/workflows/conformance.yml) runs the default lane as K groups on K machines,
each `pytest -m "not slow" --splits K --group i` with the durations in `.test_durations`
(`make durations` refreshes them). This collects the tests once, in this process, and gives the
collected items to the same pytest-split algorithm each group's run uses, for every group:

    python scripts/ci_groups.py            # K from the workflow; prints each group's size and estimate
    python scripts/ci_groups.py --json F   # also writes the groups' test ids to F

It exits 1 when the groups together do not run exactly the collected tests (one lost, or one in
two groups), or when tests are missing from `.test_durations` (they would be placed by the
average duration; refresh with `make durations`) and --strict is given.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "conformance.yml"
DURATIONS = ROOT / ".test_durations"
#: the selection of `make test` (the Makefile's test target): everything not marked slow
MARKS = "not slow"
ALGORITHM = "duration_based_chunks"


def workflow_splits(path: Path = WORKFLOW) -> int:
    """K: the number of groups the workflow's test-group job runs (its ``SPLITS``)."""
    import yaml

    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    job = doc["jobs"]["test-group"]
    splits = int(job["env"]["SPLITS"])
    groups = job["strategy"]["matrix"]["group"]
    if sorted(groups) != list(range(1, splits + 1)):
        raise SystemExit(f"{path}: the test-group matrix runs groups {groups}, not 1..{splits} (SPLITS)")
    return splits


def collect(marks: str = MARKS) -> list:
    """The items `pytest -m <marks>` would run, collected in this process."""
    import pytest

    class Items:
        items: list = []

        def pytest_collection_finish(self, session) -> None:
            self.items = list(session.items)
            for item in self.items:
                # under `-n --dist=loadgroup` (make test's addopts) each xdist worker names a test of an
                # xdist_group "<id>@<group>" before pytest-split picks its group: name them the same
                groups = {str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                          for m in item.iter_markers("xdist_group")}
                if groups:
                    item._nodeid = f"{item.nodeid}@{'_'.join(sorted(groups))}"

    got = Items()
    # syrupy would fail a collection that uses none of its snapshots; its fixtures are not set up here
    args = ["--collect-only", "-qq", "-m", marks, "-p", "no:randomly", "-p", "no:syrupy", "-o", "addopts=-p no:cacheprovider"]
    log = io.StringIO()
    with contextlib.redirect_stdout(log):
        rc = pytest.main(args, plugins=[got])
    if rc not in (0, 5):
        raise SystemExit(f"collection failed (pytest exit {rc}):\n{log.getvalue()[-3000:]}")
    return got.items


def groups(items: list, splits: int, durations: dict[str, float]) -> list[list[str]]:
    """The test ids of each group, as ``pytest --splits <splits> --group i`` selects them."""
    from pytest_split import algorithms

    algo = algorithms.Algorithms[ALGORITHM].value
    made = algo(splits, items, durations)
    return [[item.nodeid for item in g.selected] for g in made]


def check(all_ids: list[str], made: list[list[str]]) -> list[str]:
    """What is wrong with ``made`` as a partition of ``all_ids`` (empty when nothing is)."""
    problems = []
    seen: dict[str, int] = {}
    for i, ids in enumerate(made, 1):
        for t in ids:
            if t in seen:
                problems.append(f"{t} is in group {seen[t]} and group {i}")
            seen[t] = i
    problems += [f"{t} is in no group" for t in all_ids if t not in seen]
    problems += [f"{t} is in group {seen[t]} but not collected" for t in seen if t not in set(all_ids)]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/ci_groups.py", description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=None, help="K (default: the workflow's SPLITS)")
    parser.add_argument("--json", type=Path, default=None, help="write {'collected': [...], 'groups': [[...], ...]} here")
    parser.add_argument("--strict", action="store_true", help="fail when a collected test has no recorded duration")
    args = parser.parse_args(argv)
    splits = args.splits or workflow_splits()
    durations = json.loads(DURATIONS.read_text(encoding="utf-8")) if DURATIONS.is_file() else {}
    items = collect()
    all_ids = [i.nodeid for i in items]
    made = groups(items, splits, durations)
    problems = check(all_ids, made)
    missing = [t for t in all_ids if t not in durations]
    known = [durations[t] for t in all_ids if t in durations]
    average = sum(known) / len(known) if known else 0.0
    print(f"{len(all_ids)} tests in {splits} groups ({ALGORITHM}, {DURATIONS.name}: {len(known)} known, "
          f"{len(missing)} placed by the average {average:.2f} s)")
    for i, ids in enumerate(made, 1):
        estimate = sum(durations.get(t, average) for t in ids)
        files = sorted({re.sub(r"::.*", "", t) for t in ids})
        print(f"  group {i}: {len(ids)} tests, {estimate / 60:.1f} min of one worker's time, "
              f"{files[0] if files else '-'} .. {files[-1] if files else '-'}")
    if args.json:
        args.json.write_text(json.dumps({"collected": all_ids, "groups": made}, indent=1) + "\n", encoding="utf-8")
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    if args.strict and missing:
        print(f"error: {len(missing)} tests have no duration in {DURATIONS.name} (first: {missing[0]}); run make durations",
              file=sys.stderr)
        return 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
