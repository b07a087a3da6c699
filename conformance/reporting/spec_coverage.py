"""The seeds' statements and which of them a run met: the statement catalogue and its report.

The catalogue (``conformance/spec/<seed>.toml``, one file per design document) lists every checkable
statement of the five seeds: an id (``001.env.disable-fallback-execution``: the seed, its section,
the statement), the seed file, a short quote, a kind, and one status:

- ``tested``: tests cite it with ``@pytest.mark.spec("<id>", ...)``;
- ``deviation``: the reference does something else on purpose; ``doc`` links the page of ``docs/``
  that says what differs and why (tests may cite it too: they check what the reference does);
- ``not-applicable-on-CPU``: ``reason`` says why no test on this machine can check it;
- ``internal``: a statement about an implementation's own source (a file or module layout) that no
  adapter can show; ``reason`` says so and where the reference keeps it.

A statement may also name the support-matrix row that observes it (``support = [table, row,
status]``): it is met only when the probe observed that status, since a probe passes whatever
status it records. A statement quoting something checkable names the selfcheck mutants that
violate exactly it (``mutants = ["name", ...]``, registered in :mod:`conformance.selfcheck.mutants`
and the modules it imports); the selfcheck fails when one survives its citing tests.

A sentence of a seed that states no checkable behaviour (an example, a motivation, a summary of
statements listed elsewhere) is listed once as ``[[non_normative]]`` with its ``quote`` and the
``reason`` it is not a statement, so a sentence-by-sentence read of a seed can tell "not normative"
from "forgotten" (:func:`load_non_normative`).

:func:`problems` is the static check ``make test`` runs (a statement with neither a citing test nor
a documented reason, a marker citing an id the catalogue lacks); :func:`coverage` and
:func:`render` make ``spec-coverage.json`` and ``spec-coverage.md`` of one run from its test
outcomes. Loading reads five small TOML files; nothing happens at import.
"""

from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

CATALOGUE_DIR = Path(__file__).resolve().parent.parent / "spec"
TESTED, DEVIATION, NOT_APPLICABLE, INTERNAL = "tested", "deviation", "not-applicable-on-CPU", "internal"
STATUSES = (TESTED, DEVIATION, NOT_APPLICABLE, INTERNAL)
#: statuses no suite run can check: their statements are never counted as left untested
UNCHECKABLE = (NOT_APPLICABLE, INTERNAL)
KINDS = ("api", "parameter", "env", "field", "error", "behaviour", "level", "mode", "config", "name")
ID = re.compile(r"^(00[0-4])\.([a-z0-9-]+)\.([a-z0-9-]+)$")
#: a run's verdict on one statement
MET, FAILED, SKIPPED, UNTESTED = "met", "failed", "skipped", "untested"
VERDICTS = (MET, FAILED, SKIPPED, UNTESTED)
_FAILING = ("failed", "error", "fell back", "xpassed", "xfailed")


class CatalogueError(ValueError):
    """A catalogue file that does not parse or a statement that breaks the catalogue's rules; the
    message names the file and the statement."""


@dataclass(frozen=True)
class Statement:
    id: str
    seed: str
    quote: str
    kind: str
    status: str
    doc: str = ""
    reason: str = ""
    support: tuple[str, str, str] | None = None
    mutants: tuple[str, ...] = ()

    @property
    def seed_number(self) -> str:
        return self.id[:3]

    @property
    def section(self) -> str:
        return self.id.split(".")[1]


def load(directory: Path = CATALOGUE_DIR) -> dict[str, Statement]:
    """Every statement of the catalogue files in ``directory``, by id, in file order.

    Raises :class:`CatalogueError` naming the file and the statement for a bad file, an unknown
    status or kind, a duplicate id, an id that does not belong to its file's seed, or a deviation
    without its ``doc`` (a not-applicable statement without its ``reason``)."""
    out: dict[str, Statement] = {}
    files = sorted(Path(directory).glob("*.toml"))
    if not files:
        raise CatalogueError(f"no statement catalogue (*.toml) in {directory}")
    for path in files:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise CatalogueError(f"{path}: not valid TOML: {exc}") from exc
        seed = data.get("seed", "")
        for raw in data.get("statement", []):
            st = _statement(path, seed, raw)
            if st.id in out:
                raise CatalogueError(f"{path}: statement {st.id!r} is listed twice")
            out[st.id] = st
    return out


def _statement(path: Path, seed: str, raw: dict) -> Statement:
    sid = raw.get("id", "")
    where = f"{path.name}: statement {sid!r}"
    m = ID.match(sid)
    if not m or not seed.startswith(m.group(1)):
        raise CatalogueError(f"{where}: an id is '<seed>.<section>.<name>' of this file's seed ({seed or 'no seed= line'})")
    status, kind = raw.get("status"), raw.get("kind")
    if status not in STATUSES:
        raise CatalogueError(f"{where}: status {status!r}; use one of {', '.join(STATUSES)}")
    if kind not in KINDS:
        raise CatalogueError(f"{where}: kind {kind!r}; use one of {', '.join(KINDS)}")
    if not raw.get("quote") or len(raw["quote"]) > 200:
        raise CatalogueError(f"{where}: give a short quote of the seed (1 to 200 characters)")
    if status == DEVIATION and not str(raw.get("doc", "")).startswith("docs/"):
        raise CatalogueError(f"{where}: a deviation links the page of docs/ that explains it (doc = \"docs/...\")")
    if status == NOT_APPLICABLE and not raw.get("reason"):
        raise CatalogueError(f"{where}: say why it is not applicable on a CPU (reason = \"...\")")
    if status == INTERNAL and not raw.get("reason"):
        raise CatalogueError(f"{where}: say why no adapter can show it and where the reference keeps it (reason = \"...\")")
    support = raw.get("support")
    if support is not None and (len(support) != 3 or not all(isinstance(s, str) for s in support)):
        raise CatalogueError(f"{where}: support is [table, row, status]")
    mutants = raw.get("mutants", [])
    if not isinstance(mutants, list) or not all(isinstance(m, str) and m.isidentifier() for m in mutants):
        raise CatalogueError(f"{where}: mutants is a list of mutant names (mutants = [\"name\", ...])")
    if mutants and status in UNCHECKABLE:
        raise CatalogueError(f"{where}: a statement no test on a CPU checks has no mutant its tests could catch")
    return Statement(id=sid, seed=seed, quote=raw["quote"], kind=kind, status=status, doc=raw.get("doc", ""),
                     reason=raw.get("reason", ""), support=tuple(support) if support else None, mutants=tuple(mutants))


@dataclass(frozen=True)
class NonNormative:
    """A sentence of a seed that is not a checkable statement, and why."""

    seed: str
    quote: str
    reason: str


def load_non_normative(directory: Path = CATALOGUE_DIR) -> list[NonNormative]:
    """The ``[[non_normative]]`` entries of the catalogue files: a seed's sentences read and found to
    state nothing checkable. Raises :class:`CatalogueError` for an entry without its quote (1 to 200
    characters) or its reason."""
    out: list[NonNormative] = []
    for path in sorted(Path(directory).glob("*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        for raw in data.get("non_normative", []):
            quote, reason = raw.get("quote", ""), raw.get("reason", "")
            if not quote or len(quote) > 200 or not reason:
                raise CatalogueError(f"{path.name}: a non_normative entry gives a short quote (1 to 200 characters) "
                                     f"and the reason it is not a statement: {raw!r}")
            out.append(NonNormative(data.get("seed", ""), quote, reason))
    return out


def unknown_mutants(catalogue: dict[str, Statement], known) -> list[str]:
    """One line per ``mutants`` name of a statement that no registered mutant has."""
    return [f"{sid}: mutants names {m!r}, which conformance.selfcheck.mutants does not register"
            for sid, st in catalogue.items() for m in st.mutants if m not in known]


# --- citations, read from the test files without importing them ------------------------------------


def citations(paths) -> dict[str, list[str]]:
    """``{statement id: ["file::test", ...]}`` for every ``pytest.mark.spec(...)`` in the Python
    files under ``paths`` (decorators, ``pytest.param(..., marks=...)`` and ``pytestmark``) and in a
    module's ``<NAME>_SPEC = {...: "<id>"}`` table that parametrized marks read, found with
    :mod:`ast`: cheap, and without importing a test module."""
    found: dict[str, list[str]] = {}
    for root in paths:
        root = Path(root)
        for path in sorted([root] if root.is_file() else root.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for owner, ids in _marks(tree):
                for sid in ids:
                    found.setdefault(sid, []).append(f"{path.as_posix()}::{owner}")
    return found


def _marks(tree: ast.AST):
    owners: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for inner in ast.walk(node):
                owners.setdefault(id(inner), node.name)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "spec"
                and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "mark"):
            ids = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            yield owners.get(id(node), "<module>"), ids
        # a table of ids a parametrized test's marks read (``API_SPEC = {"compile": "001.api.compile"}``)
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id.endswith("_SPEC") and isinstance(node.value, ast.Dict)):
            yield node.targets[0].id, [v.value for v in node.value.values
                                       if isinstance(v, ast.Constant) and isinstance(v.value, str)]


def problems(catalogue: dict[str, Statement], cited: dict[str, list[str]], suite: str | None = None) -> list[str]:
    """What keeps the catalogue and the tests from agreeing, one line each (empty when they do):
    a ``tested`` statement no test cites, and a marker citing an id the catalogue lacks.

    With ``suite`` (the conformance tests' folder, ``conformance/tests``), a statement counts as
    tested only when a test under it cites it: a unit test of the reference (``tests/``) may cite a
    statement, but it checks no other implementation, so it leaves the statement untested in every
    report but the reference's own."""
    def in_suite(wheres):
        return [w for w in wheres if suite is None or w.startswith(suite.rstrip("/") + "/")]

    out = [f"{sid}: status 'tested' but no " + ("conformance test" if suite else "test") + f" cites it (add "
           f"@pytest.mark.spec({sid!r}) to the " + (f"test under {suite} " if suite else "test ") + "that checks it, "
           "or make it a deviation with its docs/ link or not-applicable-on-CPU with its reason)"
           for sid, st in catalogue.items() if st.status == TESTED and not in_suite(cited.get(sid, []))]
    out += [f"{where}: @pytest.mark.spec cites {sid!r}, which conformance/spec/ does not list"
            for sid, wheres in sorted(cited.items()) if sid not in catalogue for where in wheres]
    return out


def unknown_ids(ids, catalogue: dict[str, Statement]) -> list[str]:
    return [sid for sid in ids if sid not in catalogue]


# --- one run's coverage ---------------------------------------------------------------------------


def coverage(catalogue: dict[str, Statement], tests: list[dict], support_rows: list[dict]) -> dict:
    """The verdict on each statement for one run: ``met`` (a citing test passed, none failed, and the
    support row, when named, observed the stated status), ``failed`` (a citing test failed, fell
    back, errored or is a known failure, or the row observed another status), ``skipped`` (every
    citing test was skipped: the capability is absent) or ``untested`` (no citing test ran)."""
    by_id: dict[str, list[dict]] = {}
    for t in tests:
        for sid in t.get("spec", ()):
            by_id.setdefault(sid, []).append(t)
    rows = {(r["table"], r["row"]): r["status"] for r in support_rows}
    statements = []
    for sid, st in catalogue.items():
        ran = by_id.get(sid, [])
        outcomes = [t["outcome"] for t in ran]
        note = ""
        if any(o in _FAILING for o in outcomes):
            verdict = FAILED
            bad = next(t for t in ran if t["outcome"] in _FAILING)
            note = f"{bad['outcome']}: {bad['id']}"
        elif "passed" in outcomes:
            verdict = MET
            if st.support is not None and (st.support[0], st.support[1]) in rows:
                observed = rows[(st.support[0], st.support[1])]
                if observed != st.support[2]:
                    verdict, note = FAILED, f"support row observed {observed}; the seed says {st.support[2]}"
        elif outcomes:
            verdict = SKIPPED
            note = next((t.get("message", "") for t in ran if t.get("message")), "")
        else:
            verdict = UNTESTED
        statements.append({"id": sid, "seed": st.seed, "section": st.section, "kind": st.kind, "quote": st.quote,
                           "status": st.status, "doc": st.doc, "reason": st.reason, "verdict": verdict,
                           "tests": sorted(t["id"] for t in ran), "note": " ".join(str(note).split())[:300]})
    return {"seeds": _totals(statements), "statements": statements}


def totals_lines(cov: dict) -> list[str]:
    """The per-seed totals table (the first screen of ``summary.md``)."""
    lines = ["| seed | statements | met | failed | skipped | untested | deviation | n/a on CPU | internal |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for seed, s in sorted(cov["seeds"].items()):
        lines.append(f"| {seed} | {s['statements']} | {s[MET]} | {s[FAILED]} | {s[SKIPPED]} | {s[UNTESTED]} | "
                     f"{s[DEVIATION]} | {s[NOT_APPLICABLE]} | {s.get(INTERNAL, 0)} |")
    return lines


def render(cov: dict, implementation: str, lane: str) -> str:
    """``spec-coverage.md``: per seed the totals, then per section the verdicts, then the statements
    that are not met with why (a failure's test, a skip's reason, a deviation's page)."""
    lines = [f"# Spec coverage: {implementation} (lane {lane})", "",
             "Each checkable statement of the five seeds (`conformance/spec/`), and the verdict of this run "
             "of the tests that cite it. A deviation or a statement not applicable on a CPU is listed with "
             "its page or reason; the tests that cite it still ran.", "", *totals_lines(cov)]
    by_seed: dict[str, list[dict]] = {}
    for s in cov["statements"]:
        by_seed.setdefault(s["seed"], []).append(s)
    for seed, items in sorted(by_seed.items()):
        lines += ["", f"## {seed}", "", "| section | met | failed | skipped | untested |", "|---|---:|---:|---:|---:|"]
        for name, sec in cov["seeds"][seed]["sections"].items():
            lines.append(f"| {name} | {sec[MET]} | {sec[FAILED]} | {sec[SKIPPED]} | {sec[UNTESTED]} |")
        lines += ["", "| statement | quote | status | verdict | why |", "|---|---|---|---|---|"]
        for s in items:
            why = s["note"] or (s["doc"] if s["status"] == DEVIATION else s["reason"])
            if not why and s["verdict"] == MET:
                why = f"{len(s['tests'])} test(s)"
            lines.append(f"| `{s['id']}` | {_cell(s['quote'])} | {s['status']} | {s['verdict']} | {_cell(why)} |")
    return "\n".join(lines) + "\n"


def _cell(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return text.replace("|", "\\|")


# --- the lanes together ---------------------------------------------------------------------------

#: the lanes whose reports ``make spec-coverage`` merges, in the order CI runs them
LANES = ("default", "slow", "strict", "models")


def merge_lanes(catalogue: dict[str, Statement], lanes: dict[str, dict]) -> dict:
    """One coverage from several lanes' ``spec-coverage.json`` (``{lane: coverage}``): a statement
    is ``failed`` when a citing test failed in any lane, else ``met`` when one passed in any lane,
    else ``skipped`` when citing tests ran and were all skipped, else ``untested``. Each statement
    keeps its verdict per lane (``lanes``) and the tests of every lane; statements a lane's report
    lacks (an older catalogue) count as untested there."""
    per: dict[str, dict[str, dict]] = {}
    for lane, cov in lanes.items():
        for s in cov.get("statements", []):
            per.setdefault(s["id"], {})[lane] = s
    statements = []
    for sid, st in catalogue.items():
        seen = per.get(sid, {})
        verdicts = {lane: seen[lane]["verdict"] if lane in seen else UNTESTED for lane in lanes}
        verdict = next((v for v in (FAILED, MET, SKIPPED) if v in verdicts.values()), UNTESTED)
        note = next((f"{lane}: {seen[lane]['note']}" for lane in lanes
                     if lane in seen and seen[lane]["verdict"] == verdict and seen[lane]["note"]), "")
        statements.append({"id": sid, "seed": st.seed, "section": st.section, "kind": st.kind, "quote": st.quote,
                           "status": st.status, "doc": st.doc, "reason": st.reason, "verdict": verdict,
                           "lanes": verdicts, "mutants": list(st.mutants),
                           "tests": sorted({t for s in seen.values() for t in s.get("tests", ())}), "note": note[:300]})
    return {"seeds": _totals(statements), "statements": statements, "lanes": list(lanes)}


def _totals(statements: list[dict]) -> dict:
    seeds: dict[str, dict] = {}
    for s in statements:
        seed = seeds.setdefault(s["seed"], {"statements": 0, **dict.fromkeys(STATUSES, 0), **dict.fromkeys(VERDICTS, 0),
                                             "sections": {}})
        seed["statements"] += 1
        seed[s["status"]] += 1
        seed[s["verdict"]] += 1
        sec = seed["sections"].setdefault(s["section"], dict.fromkeys(VERDICTS, 0))
        sec[s["verdict"]] += 1
    return seeds


def untested_outside_not_applicable(cov: dict) -> list[dict]:
    """The statements no lane's suite run checked, leaving out those no run can check (not
    applicable on a CPU, or internal to an implementation's source)."""
    return [s for s in cov["statements"] if s["verdict"] == UNTESTED and s["status"] not in UNCHECKABLE]


def main(argv: list[str] | None = None) -> int:
    """``python -m conformance.reporting.spec_coverage [--impl NAME] [--reports DIR]``: merge the
    lanes' reports of one implementation into ``reports/<impl>/spec-coverage.{json,md}`` and print
    the statements left untested outside "n/a on CPU"; exits 1 when there are any, 2 when no lane
    wrote a report."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m conformance.reporting.spec_coverage",
                                     description="merge the lanes' spec-coverage reports of one implementation")
    parser.add_argument("--impl", default="reference", help="the implementation's report folder (reports/<impl>)")
    parser.add_argument("--reports", default="reports", type=Path)
    args = parser.parse_args(argv)
    base = args.reports / args.impl
    found = {lane: json.loads((base / lane / "spec-coverage.json").read_text())
             for lane in LANES if (base / lane / "spec-coverage.json").is_file()}
    if not found:
        print(f"no lane wrote {base}/<lane>/spec-coverage.json (lanes: {', '.join(LANES)}); run them first")
        return 2
    cov = merge_lanes(load(), found)
    (base / "spec-coverage.json").write_text(json.dumps(cov, indent=1, sort_keys=True) + "\n")
    page = render(cov, args.impl, " + ".join(found))
    (base / "spec-coverage.md").write_text(page)
    missing = [lane for lane in LANES if lane not in found]
    left = untested_outside_not_applicable(cov)
    print(f"wrote {base}/spec-coverage.md from lanes {', '.join(found)}"
          + (f" (no report from {', '.join(missing)})" if missing else ""))
    for line in totals_lines(cov):
        print(line)
    print(f"{len(left)} statement(s) untested outside n/a on CPU and internal" + (":" if left else ""))
    for s in left:
        print(f"  {s['id']} ({s['status']}): {s['quote'][:100]}")
    return 1 if left else 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
