"""The op lane's tables: ``reports/<impl>/<lane>/ops.md`` and ``ops.json``, made from the verdicts
the lane's tests leave in ``op-verdicts/``, and their checked-in copies ``docs/support/<impl>-ops.md``
and ``.json``.

::

    python -m conformance.reporting.ops_table [--spec SPEC]            # write reports/<impl>/ops/ops.md, ops.json
    python -m conformance.reporting.ops_table [--spec SPEC] --docs     # and the docs/support/ copies
    python -m conformance.reporting.ops_table --docs --base docs/support/<impl>-ops.json   # a run of some
                                                                       # dtypes completes the checked-in table
    python -m conformance.reporting.ops_table [--spec SPEC] --check    # a fresh full run against the copy
    python -m conformance.reporting.ops_table [--spec SPEC] --check --part day/7   # the day's seventh of it
    python -m conformance.reporting.ops_table --compare BEFORE.json AFTER.json   # two runs, row by row

The table lists the rows a team acts on first (wrong, error, fell back), then graph breaks, skips,
and a compact op x dtype grid of every row. ``--check`` runs the whole lane in a child pytest as
another machine would (another reported host, another TMPDIR and cache home) and compares each
row's verdict with the checked-in JSON; the details (max errors, messages) are shown but not
compared, since a max error depends on the host's vector width.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable

from conformance.harness.implementation import Implementation
from conformance.harness.env import OPS_PART, ops_part
from conformance.harness.opinfo import DTYPES, MAX_SAMPLES, VERDICTS, Verdict, in_part
from conformance.reporting import ops_edges

VERDICT_DIR = "op-verdicts"
_PACKAGE = Path(__file__).resolve().parent.parent
_ROOT = _PACKAGE.parent
DOCS = _ROOT / "docs" / "support"
KNOWN = _PACKAGE / "expected" / "ops"
_MARK = {"matches": "ok", "graph break": "break", "undeclared graph break": "BREAK?", "fell back": "fallback",
         "wrong": "WRONG", "error": "ERROR", "not supported": "skip"}
#: The verdicts a team acts on.
ACT_ON = ("wrong", "error", "undeclared graph break", "fell back")


class OpsTableError(RuntimeError):
    """The verdicts or the known-rows file cannot make a table; the message says what to fix."""


def _owner(impl: Implementation | str) -> str:
    """Whose table and known rows apply: a selfcheck mutant of the reference is held to the reference's."""
    if isinstance(impl, str):
        return impl
    return impl.snapshots_of or impl.name


def known_file(impl: Implementation | str, variant: str = "") -> Path:
    """``conformance/expected/ops/<impl>.txt``; ``<impl>-<variant>.txt`` for a variant of the lane
    (``edges``)."""
    return KNOWN / f"{_owner(impl)}{'-' + variant if variant else ''}.txt"


#: A known row whose cause starts with this depends on the host: eager's own kernel rounds
#: differently on different CPUs (its float16 convolutions accumulate in float16 on some, in
#: float32 on others), so the row matches eager on one machine and not on another. Either verdict
#: is accepted for it, and the drift check does not compare it.
HOST = "host:"


def host_rows(impl: Implementation | str, variant: str = "") -> set[tuple[str, str]]:
    """The known rows whose cause starts with :data:`HOST`."""
    return {row for row, cause in known_rows(impl, variant).items() if cause.startswith(HOST)}


def known_rows(impl: Implementation | str, variant: str = "") -> dict[tuple[str, str], str]:
    """``{(entry, dtype): cause}`` from ``conformance/expected/ops/<impl>.txt`` (one ``entry dtype
    # cause`` a line), or the variant's file; empty when the file does not exist."""
    path = known_file(impl, variant)
    if not path.is_file():
        return {}
    out = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        row, _, cause = line.partition("#")
        words = row.split()
        if len(words) != 2 or not cause.strip():
            raise OpsTableError(f"{path}:{number}: expected 'entry dtype  # cause', got {raw!r}")
        out[(words[0], words[1])] = cause.strip()
    return out


def _checked_in(owner: str) -> dict[tuple[str, str], str]:
    path = DOCS / f"{owner}-ops.json"
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return {(r["entry"], r["dtype"]): r["verdict"] for r in data["rows"]}


_CHECKED_IN: dict[str, dict[tuple[str, str], str]] = {}


def checked_in_verdict(impl: Implementation | str, entry: str, dtype: str) -> str | None:
    """The verdict of the row in the checked-in table of ``impl`` (``None``: no table or no row)."""
    owner = _owner(impl)
    if owner not in _CHECKED_IN:
        _CHECKED_IN[owner] = _checked_in(owner)
    return _CHECKED_IN[owner].get((entry, dtype))


def covered_rows(impl: Implementation | str) -> set[tuple[str, str]]:
    """The rows of the checked-in table of ``impl`` (empty: it has none)."""
    owner = _owner(impl)
    if owner not in _CHECKED_IN:
        _CHECKED_IN[owner] = _checked_in(owner)
    return set(_CHECKED_IN[owner])


def record(report_dir: Path, row: Verdict, variant: str = "") -> None:
    """Leave one row's verdict where the table is made from (one file per row: workers never share
    one); a variant's (``edges``) in its own directory."""
    out = Path(report_dir) / (f"{VERDICT_DIR}-{variant}" if variant else VERDICT_DIR)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{row.entry}@{row.dtype}.json").write_text(json.dumps(row.as_dict(), sort_keys=True), encoding="utf-8")


def _clean(text: str) -> str:
    """A detail without what changes from run to run: the reference's graph names carry a counter."""
    text = re.sub(r"graph '[^']*'", "graph", text)
    return " ".join(text.split())


def collect(report_dir: Path) -> list[dict[str, Any]]:
    rows = []
    for path in sorted((Path(report_dir) / VERDICT_DIR).glob("*.json")):
        row = json.loads(path.read_text(encoding="utf-8"))
        row["detail"] = _clean(row["detail"])
        rows.append(row)
    if not rows:
        raise OpsTableError(f"no verdicts in {Path(report_dir) / VERDICT_DIR}; run the op lane first (make ops)")
    return rows


def build(rows: Iterable[dict[str, Any]], impl: str, *, partial: str = "") -> dict[str, Any]:
    """The table's JSON: counts per verdict and per dtype, every row (sorted: the rows to act on first)."""
    rows = sorted(rows, key=lambda r: (VERDICTS.index(r["verdict"]), r["entry"], DTYPES.index(r["dtype"])))
    known = known_rows(impl)
    for r in rows:
        cause = known.get((r["entry"], r["dtype"]))
        if cause:
            r["known"] = cause
        r.pop("evidence", None)
    counts = collections.Counter(r["verdict"] for r in rows)
    per_dtype = {d: dict(collections.Counter(r["verdict"] for r in rows if r["dtype"] == d)) for d in DTYPES}
    return {
        "implementation": impl,
        "entries": len({r["entry"] for r in rows}),
        "rows": rows,
        "counts": {v: counts.get(v, 0) for v in VERDICTS},
        "per_dtype": {d: c for d, c in per_dtype.items() if c},
        "samples_per_row": MAX_SAMPLES,
        "partial": partial,
    }


def render(table: dict[str, Any]) -> str:
    impl, rows = table["implementation"], table["rows"]
    lines = [f"# Op support of {impl} (torch OpInfo, CPU)", ""]
    if table.get("partial"):
        lines += [f"**Partial:** {table['partial']}", ""]
    lines += [
        f"{table['entries']} OpInfo entries, {len(rows)} (entry, dtype) rows; up to {table['samples_per_row']} samples "
        "a row, each compiled through the adapter and compared with eager (the OpInfo's tolerance where it "
        "declares one, else the suite's for the dtype; integers and bools exact, but a floating result of an integer or bool row "
        "to the suite's tolerance for its dtype).",
        "",
        "| verdict | " + " | ".join(DTYPES) + " | all |",
        "|---|" + "---|" * (len(DTYPES) + 1),
    ]
    for v in VERDICTS:
        cells = [str(table["per_dtype"].get(d, {}).get(v, 0)) for d in DTYPES]
        lines.append(f"| {v} | " + " | ".join(cells) + f" | {table['counts'][v]} |")
    act = [r for r in rows if r["verdict"] in ACT_ON]
    lines += ["", "## Rows to act on (" + ", ".join(ACT_ON) + ")", ""]
    if act:
        lines += ["| entry | dtype | verdict | detail | sample | known cause |", "|---|---|---|---|---|---|"]
        for r in act:
            lines.append(f"| {r['entry']} | {r['dtype']} | {r['verdict']} | {_cell(r['detail'])} | {_cell(r['sample'])} | "
                         f"{_cell(r.get('known', ''))} |")
    else:
        lines.append("None.")
    kernels = [r for r in rows if r.get("ran", "").startswith("ops run as ATen kernels") and r["verdict"] != "fell back"]
    observed = sum(1 for r in rows if r.get("ran"))
    if observed:
        none = sum(1 for r in rows if r.get("ran", "").startswith("no ATen compute kernel"))
        eager = sum(1 for r in rows if r["verdict"] == "fell back" and r["detail"].startswith("ran eagerly"))
        lines += ["", "## What the compiled calls ran", "",
                  f"The suite's observer saw the compiled calls of {observed} rows: in {none} no ATen compute kernel "
                  f"ran (compiled, or a graph of views only); in {eager} a call ran every compute op of its graph "
                  f"as an ATen kernel (*fell back* above); {len(kernels)} compiled some ops and ran others as "
                  "ATen kernels (a library call inside compiled code), listed here."]
        if kernels:
            lines += ["", "| entry | dtype | verdict | ran as ATen kernels |", "|---|---|---|---|"]
            lines += [f"| {r['entry']} | {r['dtype']} | {r['verdict']} | {_cell(r['ran'])} |" for r in kernels]
    breaks = [r for r in rows if r["verdict"] == "graph break"]
    if breaks:
        lines += ["", "## Graph breaks (the op ran outside the compiled graph; its result matches eager)", "",
                  "| entry | dtype | rule |", "|---|---|---|"]
        lines += [f"| {r['entry']} | {r['dtype']} | {_cell(r['detail'])} |" for r in breaks]
    skips = [r for r in rows if r["verdict"] == "not supported"]
    if skips:
        lines += ["", "## Not supported (skipped)", "", "| entry | dtype | why |", "|---|---|---|"]
        lines += [f"| {r['entry']} | {r['dtype']} | {_cell(r['detail'])} |" for r in skips]
    grid: dict[str, dict[str, str]] = collections.defaultdict(dict)
    for r in rows:
        grid[r["entry"]][r["dtype"]] = _MARK[r["verdict"]]
    lines += ["", "## Every entry", "", "| entry | " + " | ".join(DTYPES) + " |", "|---|" + "---|" * len(DTYPES)]
    for entry in sorted(grid):
        lines.append(f"| {entry} | " + " | ".join(grid[entry].get(d, "") for d in DTYPES) + " |")
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    text = text.replace("|", "\\|")
    return text if len(text) <= 160 else text[:157] + "..."


def carried_over(base: Path, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` plus the rows of the table ``base`` (an ``ops.json``, e.g. the checked-in copy) that
    this run did not run: a run of some dtypes or rows completes a table instead of replacing it."""
    ran = {(r["entry"], r["dtype"]) for r in rows}
    old = json.loads(Path(base).read_text(encoding="utf-8"))["rows"]
    return rows + [dict(r) for r in old if (r["entry"], r["dtype"]) not in ran]


def write(report_dir: Path, impl: str, *, docs: bool = False, partial: str = "", base: Path | None = None) -> dict[str, Any]:
    rows = collect(report_dir)
    if base is not None:
        rows = carried_over(base, rows)
    table = build(rows, impl, partial=partial)
    edge_rows = ops_edges.collect(Path(report_dir) / f"{VERDICT_DIR}-{ops_edges.VARIANT}", _clean)
    if edge_rows:
        table["edges"] = ops_edges.build(table["rows"], edge_rows, known_rows(impl, ops_edges.VARIANT))
    text = render(table) + (ops_edges.render(table["edges"]) if edge_rows else "")
    data = json.dumps(table, indent=1, sort_keys=True) + "\n"
    (Path(report_dir) / "ops.md").write_text(text, encoding="utf-8")
    (Path(report_dir) / "ops.json").write_text(data, encoding="utf-8")
    if docs:
        header = f"<!-- Generated from reports/{impl}/ops/ops.md by `make ops-docs`; regenerate, do not edit. -->\n"
        (DOCS / f"{impl}-ops.md").write_text(header + text, encoding="utf-8")
        (DOCS / f"{impl}-ops.json").write_text(data, encoding="utf-8")
    return table


def drift(checked_in: dict[str, Any], fresh: dict[str, Any], host: set[tuple[str, str]] = frozenset()) -> list[str]:
    """One line per row whose verdict differs (or that only one of the two tables has); the rows of
    ``host`` (:func:`host_rows`) are compared only for being there."""
    old = {(r["entry"], r["dtype"]): r for r in checked_in["rows"]}
    new = {(r["entry"], r["dtype"]): r for r in fresh["rows"]}
    out = []
    for key in sorted(old.keys() | new.keys()):
        a, b = old.get(key), new.get(key)
        if a is None or b is None or (a["verdict"] != b["verdict"] and key not in host):
            was = a["verdict"] if a else "absent"
            now = f"{b['verdict']} ({b['detail'][:120]})" if b else "absent"
            out.append(f"{key[0]} {key[1]}: checked in {was}, fresh run {now}")
    return out


def check(impl: str, spec: str, jobs: str, part: tuple[int, int] | None = None) -> int:
    """Run the whole lane against ``spec`` as another machine would and compare with the copy;
    ``part`` ``(K, N)``: only part K of N of the rows (:func:`~conformance.harness.opinfo.in_part`),
    compared with the same part of the copy."""
    path = DOCS / f"{impl}-ops.json"
    if not path.is_file():
        print(f"ops-drift: no checked-in table {path}; run `make ops-docs` first")
        return 1
    with tempfile.TemporaryDirectory(prefix=f"ops-{impl}-") as scratch:
        home = Path(scratch)
        (home / "tmp").mkdir()
        (home / "cache").mkdir()
        env = {**os.environ, "CONFORMANCE_OPS": "all", "NEURON_REFERENCE_HOST_IDENTITY": "x86_64:ops-drift check, another CPU model",
               "TMPDIR": str(home / "tmp"), "XDG_CACHE_HOME": str(home / "cache")}
        if part is not None:
            env[OPS_PART] = f"{part[0]}/{part[1]}"
        cmd = [sys.executable, "-m", "pytest", "conformance/tests/test_ops.py", "--conformance-impl", spec,
               "--conformance-report-dir", scratch, "--conformance-lane", "ops", "-q", "-p", "no:cacheprovider",
               "-o", "addopts=", "-n", jobs]
        proc = subprocess.run(cmd, cwd=_ROOT, env=env, capture_output=True, text=True)
        try:
            fresh = build(collect(home / impl / "ops"), impl)
        except OpsTableError as exc:
            print(f"ops-drift: {exc}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
            return 1
    checked_in = json.loads(path.read_text(encoding="utf-8"))
    what = "every row"
    if part is not None:
        checked_in = {**checked_in, "rows": [r for r in checked_in["rows"] if in_part(r["entry"], r["dtype"], part)]}
        what = f"part {part[0]} of {part[1]} ({len(checked_in['rows'])} rows)"
    lines = drift(checked_in, fresh, host_rows(impl))
    for line in lines:
        print(f"ops-drift: {line}")
    print(f"ops-drift: {impl}, {what}: {len(lines)} row(s) differ from {path.relative_to(_ROOT)}")
    return 1 if lines else 0


def _part(text: str, today: datetime.date | None = None) -> tuple[int, int]:
    """``K/N``, or ``day/N``: the part of the day (days since 1970 modulo N, UTC), so that runs on
    N consecutive days check every row."""
    k, _, n = text.partition("/")
    if k == "day" and n.isdigit() and int(n) >= 1:
        day = today or datetime.datetime.now(datetime.timezone.utc).date()
        return (day - datetime.date(1970, 1, 1)).days % int(n), int(n)
    part = ops_part({OPS_PART: text})
    assert part is not None
    return part


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.reporting.ops_table", description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", default=None, help="the implementation (package.module:factory; default the reference)")
    parser.add_argument("--report-dir", type=Path, default=None, help="reports/<impl>/ops, holding op-verdicts/")
    parser.add_argument("--clear", action="store_true", help="remove the previous run's verdicts and stop")
    parser.add_argument("--docs", action="store_true", help="also write docs/support/<impl>-ops.md and .json")
    parser.add_argument("--partial", default="", help="label the table partial, saying what it covers")
    parser.add_argument("--base", type=Path, default=None,
                        help="an ops.json whose rows this run did not run are carried into the table (a run of some dtypes)")
    parser.add_argument("--check", action="store_true", help="run the whole lane fresh and compare with the copy")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"),
                        help="compare two ops.json (two runs, or the checked-in copy and a run) and stop")
    parser.add_argument("--part", default=None, metavar="K/N",
                        help="with --check: only part K of N of the rows (N parts hold every row once); "
                             "'day/N': the part of today's date (UTC), so N days of runs cover every row")
    parser.add_argument("-n", "--jobs", default="2")
    args = parser.parse_args(argv)
    if args.compare:
        before, after = (json.loads(p.read_text(encoding="utf-8")) for p in args.compare)
        lines = drift(before, after)
        for line in lines:
            print(line.replace("checked in", "before").replace("fresh run", "after"))
        print(f"ops-table: {len(lines)} row(s) changed verdict; counts before {before['counts']}, after {after['counts']}")
        return 1 if lines else 0
    from conformance.harness.implementation import DEFAULT_IMPL, load_implementation

    spec = args.spec or DEFAULT_IMPL
    impl = _owner(load_implementation(spec))
    report_dir = args.report_dir or Path("reports") / impl / "ops"
    if args.clear:
        shutil.rmtree(report_dir / VERDICT_DIR, ignore_errors=True)
        shutil.rmtree(report_dir / f"{VERDICT_DIR}-{ops_edges.VARIANT}", ignore_errors=True)
        return 0
    if args.check:
        return check(impl, spec, args.jobs, part=_part(args.part) if args.part else None)
    table = write(report_dir, impl, docs=args.docs, partial=args.partial, base=args.base)
    print(f"ops-table: {impl}: {table['entries']} entries, {len(table['rows'])} rows, "
          + ", ".join(f"{v} {n}" for v, n in table["counts"].items()) + f"; {report_dir}/ops.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
