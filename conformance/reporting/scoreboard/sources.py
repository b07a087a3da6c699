"""The scoreboard's inputs, read from disk and checked: op tables, support matrices, run summaries.

Nothing here runs the suite. A file that cannot be read or is not what its name promises (a
``summary.json`` of another tool, an op table without rows) is left out and recorded in
:attr:`Inputs.skipped` as ``(path, why)``; the caller prints those as warnings and the page lists
them. Only a directory that does not exist where one was asked for is an error
(:class:`ScoreboardInputError`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The implementations the project itself tables, in the order the page shows them; any other
#: implementation found in the inputs follows, by name.
KNOWN_ORDER = ("reference", "inductor", "aot_eager", "turbine_cpu")

_MATRIX_TITLE = re.compile(r"^# Support matrix: (?P<name>\S+)\s*$")
_SUMMARY_KEYS = {"schema_version": int, "implementation": str, "lane": str, "totals": dict,
                 "contracts": dict, "tests": list}
_OPS_KEYS = {"implementation": str, "rows": list, "counts": dict}
_ROW_KEYS = ("entry", "dtype", "verdict")


class ScoreboardInputError(ValueError):
    """An input directory the scoreboard was pointed at does not exist; the message names it."""


@dataclass(frozen=True)
class SupportRow:
    table: str
    row: str
    status: str
    evidence: str
    notes: str


@dataclass
class Inputs:
    """Everything the page is made from. ``runs`` and ``history`` hold summaries as
    :func:`conformance.reporting.report.summarize` writes them, each with its ``_source`` path."""

    ops: dict[str, dict[str, Any]] = field(default_factory=dict)
    ops_sources: dict[str, str] = field(default_factory=dict)
    support: dict[str, list[SupportRow]] = field(default_factory=dict)
    support_sources: dict[str, str] = field(default_factory=dict)
    runs: list[dict[str, Any]] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def implementations(self) -> list[str]:
        """Every implementation with an op table, a support matrix or a run, in the page's order."""
        names = set(self.ops) | set(self.support) | {r["implementation"] for r in self.runs}
        known = [n for n in KNOWN_ORDER if n in names]
        return known + sorted(names - set(known))


def read(docs: Path, reports: Path | list[Path] | None, history: Path | None = None) -> Inputs:
    """The inputs under ``docs`` (the checked-in tables), each directory of ``reports``
    (``<impl>/<lane>/summary.json`` below it; one that does not exist is passed over: a fresh clone
    has run nothing) and ``history`` (any ``*.json`` below it).

    Raises :class:`ScoreboardInputError` when ``docs`` or a given ``history`` is not a directory."""
    if not Path(docs).is_dir():
        raise ScoreboardInputError(f"{docs}: no such directory (the checked-in tables are read from docs/support/)")
    if history is not None and not Path(history).is_dir():
        raise ScoreboardInputError(f"{history}: no such directory of earlier summary.json files (--history, SCOREBOARD_HISTORY)")
    out = Inputs()
    for path in sorted(Path(docs).glob("*-ops.json")):
        table = _load_json(path, out)
        if table is None:
            continue
        why = _ops_problem(table)
        if why:
            out.skipped.append((str(path), why))
            continue
        out.ops[table["implementation"]] = table
        out.ops_sources[table["implementation"]] = str(path)
    for path in sorted(Path(docs).glob("*.md")):
        name, rows = _support_matrix(path)
        if name:
            out.support[name] = rows
            out.support_sources[name] = str(path)
    seen: set[tuple[str, str]] = set()
    report_dirs = [] if reports is None else [reports] if isinstance(reports, (str, Path)) else list(reports)
    for path in (p for d in report_dirs if Path(d).is_dir() for p in sorted(Path(d).glob("*/*/summary.json"))):
        summary = _summary(path, out)
        if summary is None:
            continue
        key = (summary["implementation"], summary["lane"])
        if key in seen:
            out.skipped.append((str(path), f"a second summary of {key[0]}, lane {key[1]} (the first one found is shown)"))
            continue
        seen.add(key)
        out.runs.append(summary)
    if history is not None:
        for path in sorted(Path(history).rglob("*.json")):
            summary = _summary(path, out)
            if summary is not None:
                out.history.append(summary)
    return out


def _load_json(path: Path, out: Inputs) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        out.skipped.append((str(path), f"cannot be read: {exc}"))
    except json.JSONDecodeError as exc:
        out.skipped.append((str(path), f"not valid JSON: {exc}"))
    return None


def _summary(path: Path, out: Inputs) -> dict[str, Any] | None:
    data = _load_json(path, out)
    if data is None:
        return None
    why = _summary_problem(data)
    if why:
        out.skipped.append((str(path), why))
        return None
    return {**data, "_source": str(path)}


def _typed_keys_problem(data: Any, keys: dict[str, type]) -> str:
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not an object"
    missing = [k for k in keys if k not in data]
    if missing:
        return "no " + ", ".join(repr(k) for k in missing)
    wrong = [k for k, t in keys.items() if not isinstance(data[k], t) or (t is int and isinstance(data[k], bool))]
    if wrong:
        return ", ".join(f"{k!r} is not a {keys[k].__name__}" for k in wrong)
    return ""


def _summary_problem(data: Any) -> str:
    """Why ``data`` is not a conformance run's summary (empty when it is one)."""
    why = _typed_keys_problem(data, _SUMMARY_KEYS)
    if why:
        return f"not a conformance summary.json ({why})"
    if not all(isinstance(n, int) for n in data["totals"].values()):
        return "not a conformance summary.json (a total that is not a number)"
    for test in data["tests"]:
        if not isinstance(test, dict) or not isinstance(test.get("id"), str) or not isinstance(test.get("outcome"), str):
            return "not a conformance summary.json (a test without its 'id' and 'outcome')"
    for name, counts in data["contracts"].items():
        if not isinstance(counts, dict) or not all(isinstance(n, int) for n in counts.values()):
            return f"not a conformance summary.json (contract {name!r} has no counts)"
    return ""


def _ops_problem(data: Any) -> str:
    why = _typed_keys_problem(data, _OPS_KEYS)
    if why:
        return f"not an op table ({why})"
    for row in data["rows"]:
        if not isinstance(row, dict) or not all(isinstance(row.get(k), str) for k in _ROW_KEYS):
            return "not an op table (a row without its entry, dtype and verdict)"
    return ""


def _support_matrix(path: Path) -> tuple[str, list[SupportRow]]:
    """The implementation and rows of a checked-in support matrix (``("", [])`` for another page).

    The matrix is the plugin's Markdown: a ``## <table>`` heading over a table whose columns are
    the row's name (in backticks), Status, Evidence and Notes."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return "", []
    name = next((m.group("name") for m in map(_MATRIX_TITLE.match, lines) if m), "")
    if not name:
        return "", []
    rows, table, header = [], "", None
    for line in lines:
        if line.startswith("## "):
            table, header = line[3:].strip(), None
            continue
        if not line.startswith("|"):
            header = None
            continue
        cells = _cells(line)
        if header is None:
            header = cells
            continue
        if set("".join(cells)) <= set("-: "):
            continue
        record = dict(zip(header, cells))
        status = record.get("Status")
        if status is None or not table:
            continue
        rows.append(SupportRow(table=table, row=cells[0].strip("`"), status=status,
                               evidence=record.get("Evidence", ""), notes=record.get("Notes", "")))
    return name, rows


def _cells(line: str) -> list[str]:
    """The cells of a Markdown table line, ``\\|`` kept as a literal bar."""
    inner = line.strip().removeprefix("|").removesuffix("|")
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", inner)]
