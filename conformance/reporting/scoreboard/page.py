"""The scoreboard's data and its page: :func:`shape` turns :class:`~.sources.Inputs` into plain
dicts and lists, :func:`render` makes ``index.html`` of them, :func:`write` puts the page and its
static files in a directory.

The op x dtype grid (thousands of cells per implementation) travels as JSON inside the page, its
repeated texts (a rule of a graph break, a known cause) stored once in a string table, and is drawn
and filtered by ``static/scoreboard.js``; everything else is HTML from the template. The template
escapes every value it prints; the JSON is written so that no text in it can close its
``<script>`` element, and the script puts report text on the page only as text, never as markup.
"""

from __future__ import annotations

import datetime
import json
import shutil
from pathlib import Path
from typing import Any

import jinja2
import markupsafe

from conformance.harness.opinfo import DTYPES, VERDICTS
from conformance.reporting import spec_coverage
from conformance.reporting.scoreboard.sources import Inputs

_HERE = Path(__file__).resolve().parent
STATIC = _HERE / "static"
TEMPLATES = _HERE / "templates"

#: A run's outcomes in the order the page shows them (the summary's own keys, worst first after passed).
OUTCOMES = ("passed", "failed", "fell back", "error", "xpassed", "skipped", "xfailed")
PROBLEMS = ("failed", "fell back", "error", "xpassed")
#: A failure message is cut here on the page (the run's summary.md and junit.xml keep it whole).
MESSAGE_LIMIT = 4000
SUPPORT_STATUSES = ("Supported", "Partial", "Unsupported", "Unknown")
#: What a cell of the op grid reads (its colour says the same, for those who see colours).
VERDICT_ABBR = {"matches": "ok", "graph break": "brk", "undeclared graph break": "brk?", "fell back": "fb",
                "wrong": "WRONG", "error": "ERR", "not supported": "n/s"}


class _Strings:
    """A string table: each distinct text once, cells refer to it by index (0 is the empty text)."""

    def __init__(self) -> None:
        self.items: list[str] = [""]
        self._index: dict[str, int] = {"": 0}

    def __call__(self, text: Any) -> int:
        text = "" if text is None else str(text)
        if text not in self._index:
            self._index[text] = len(self.items)
            self.items.append(text)
        return self._index[text]


def _ordered(known: tuple[str, ...], found) -> list[str]:
    found = set(found)
    return [k for k in known if k in found] + sorted(found - set(known))


def ops_data(inputs: Inputs, impls: list[str]) -> dict[str, Any]:
    """The op grid: entries, dtypes, verdicts, and per implementation its counts and its cells, each
    ``[entry, dtype, verdict, detail, sample, known cause, tolerance, samples, what ran]`` (the first
    three and the texts as indexes into ``entries``, ``dtypes``, ``verdicts`` and ``strings``)."""
    strings = _Strings()
    tables = {name: inputs.ops[name] for name in impls if name in inputs.ops}
    rows = [r for t in tables.values() for r in t["rows"]]
    entries = sorted({r["entry"] for r in rows})
    dtypes = _ordered(DTYPES, (r["dtype"] for r in rows))
    verdicts = _ordered(VERDICTS, (r["verdict"] for r in rows))
    e_at, d_at, v_at = ({x: i for i, x in enumerate(xs)} for xs in (entries, dtypes, verdicts))
    out: dict[str, Any] = {}
    for name, table in tables.items():
        cells = []
        for r in table["rows"]:
            # what the suite's observer saw the compiled calls run (a table of the op lane), or a
            # run's own evidence record
            evidence = r.get("ran") or r.get("evidence")
            cells.append([e_at[r["entry"]], d_at[r["dtype"]], v_at[r["verdict"]], strings(r.get("detail")),
                          strings(r.get("sample")), strings(r.get("known")), strings(r.get("tolerance")),
                          r.get("samples") if isinstance(r.get("samples"), int) else None,
                          strings(evidence if isinstance(evidence, str) else json.dumps(evidence, sort_keys=True) if evidence else "")])
        out[name] = {"source": inputs.ops_sources.get(name, ""), "partial": str(table.get("partial") or ""),
                     "counts": {v: sum(1 for c in cells if verdicts[c[2]] == v) for v in verdicts}, "cells": cells}
    return {"entries": entries, "dtypes": dtypes, "verdicts": verdicts, "strings": strings.items, "impls": out,
            "abbr": {v: VERDICT_ABBR.get(v, v[:4]) for v in verdicts}}


def _contract(test_id: str) -> str:
    return Path(test_id.split("::", 1)[0]).stem.removeprefix("test_")


def _cut(text: Any, limit: int = MESSAGE_LIMIT) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def run_view(summary: dict[str, Any], index: int) -> dict[str, Any]:
    """One run's contracts: counts per outcome per contract, its problems (failed, fell back, error,
    xpassed) and its skips and known failures, each with its message."""
    problems: dict[str, list[dict[str, str]]] = {}
    skips: dict[str, list[dict[str, str]]] = {}
    for t in summary["tests"]:
        bucket = problems if t["outcome"] in PROBLEMS else skips if t["outcome"] in ("skipped", "xfailed") else None
        if bucket is not None:
            bucket.setdefault(_contract(t["id"]), []).append(
                {"id": t["id"], "outcome": t["outcome"], "message": _cut(t.get("message"))})
    return {
        "key": f"run{index}",
        "impl": summary["implementation"],
        "lane": summary["lane"],
        "source": summary["_source"],
        "started": str(summary.get("started", "")),
        "wall_s": summary.get("wall_s"),
        "totals": {o: summary["totals"].get(o, 0) for o in _ordered(OUTCOMES, summary["totals"])},
        "contracts": summary["contracts"],
        "problems": problems,
        "skips": skips,
    }


def _preferred_runs(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per implementation the run its seed statements are read from: the default lane, else the
    first lane by name."""
    out: dict[str, dict[str, Any]] = {}
    for r in sorted(runs, key=lambda r: (r["lane"] != "default", r["lane"])):
        out.setdefault(r["implementation"], r)
    return out


def seeds_data(runs: list[dict[str, Any]], impls: list[str], catalogue_dir: Path | None = None) -> dict[str, Any]:
    """Each seed's statements with the quote and the catalogue's status, and per implementation the
    verdict of its run (met, failed, skipped, untested; ``None`` where it left no report)."""
    catalogue = spec_coverage.load(catalogue_dir) if catalogue_dir else spec_coverage.load()
    chosen = _preferred_runs(runs)
    covered = {name: spec_coverage.coverage(catalogue, run["tests"], [r for r in run.get("support", []) if isinstance(r, dict)])
               for name, run in chosen.items()}
    by_id = {name: {s["id"]: s for s in cov["statements"]} for name, cov in covered.items()}
    seeds: dict[str, dict[str, Any]] = {}
    for st in catalogue.values():
        seed = seeds.setdefault(st.seed, {"seed": st.seed, "statements": [], "deviation": 0, "not_applicable": 0,
                                          "verdicts": {name: dict.fromkeys(spec_coverage.VERDICTS, 0) for name in covered}})
        seed["deviation"] += st.status == spec_coverage.DEVIATION
        seed["not_applicable"] += st.status == spec_coverage.NOT_APPLICABLE
        verdicts = {}
        for name in impls:
            s = by_id.get(name, {}).get(st.id)
            if s is None:
                verdicts[name] = None
                continue
            verdicts[name] = {"verdict": s["verdict"], "note": s["note"]}
            seed["verdicts"][name][s["verdict"]] += 1
        seed["statements"].append({"id": st.id, "quote": st.quote, "status": st.status, "kind": st.kind,
                                   "doc": st.doc, "reason": st.reason, "verdicts": verdicts})
    return {"seeds": [seeds[k] for k in sorted(seeds)], "verdicts": list(spec_coverage.VERDICTS),
            "runs": {name: f"{run['implementation']} · lane {run['lane']}" for name, run in chosen.items()}}


def support_data(inputs: Inputs, impls: list[str]) -> list[dict[str, Any]]:
    """The support matrices side by side: per table, each row with every implementation's cell."""
    tables: dict[str, dict[str, dict[str, Any]]] = {}
    for name in impls:
        for r in inputs.support.get(name, []):
            row = tables.setdefault(r.table, {}).setdefault(r.row, {})
            row[name] = {"status": r.status, "evidence": r.evidence, "notes": r.notes}
    return [{"title": title, "rows": [{"row": row, "cells": cells} for row, cells in rows.items()]}
            for title, rows in tables.items()]


def history_data(inputs: Inputs) -> list[dict[str, Any]]:
    """Per implementation and lane, its runs' totals in time order (the history files and the runs
    now in reports/, each run once), with the bars of a small stacked chart."""
    seen, series = set(), {}
    for s in inputs.history + inputs.runs:
        key = (s["implementation"], s["lane"], str(s.get("started") or s["_source"]))
        if key in seen:
            continue
        seen.add(key)
        series.setdefault((s["implementation"], s["lane"]), []).append(s)
    out = []
    for (impl, lane), items in sorted(series.items()):
        items.sort(key=lambda s: str(s.get("started", "")))
        points = [{"started": str(s.get("started", "")) or s["_source"], "source": s["_source"],
                   "totals": {o: s["totals"].get(o, 0) for o in OUTCOMES}} for s in items]
        out.append({"impl": impl, "lane": lane, "points": points, "chart": _chart(points)})
    return out


_CHART_H, _BAR_W, _GAP = 80, 14, 4
_CHART_OUTCOMES = ("passed", "skipped", "fell back", "failed", "error")


def _chart(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Stacked bars, one per run (passed at the bottom), scaled to the largest run."""
    top = max((sum(p["totals"][o] for o in _CHART_OUTCOMES) for p in points), default=0) or 1
    bars = []
    for i, p in enumerate(points):
        y, x = float(_CHART_H), i * (_BAR_W + _GAP)
        rects = []
        for o in _CHART_OUTCOMES:
            h = _CHART_H * p["totals"][o] / top
            if h > 0:
                y -= h
                rects.append({"outcome": o, "x": x, "y": round(y, 2), "h": round(h, 2), "n": p["totals"][o]})
        bars.append({"label": p["started"], "rects": rects})
    return {"width": max(1, len(points)) * (_BAR_W + _GAP), "height": _CHART_H, "bar": _BAR_W, "bars": bars}


def shape(inputs: Inputs, catalogue_dir: Path | None = None) -> dict[str, Any]:
    """Everything the template and the script need, from ``inputs``."""
    impls = inputs.implementations()
    runs = [run_view(s, i) for i, s in enumerate(sorted(inputs.runs, key=lambda s: (impls.index(s["implementation"]), s["lane"])))]
    contracts = sorted({c for r in runs for c in r["contracts"]})
    seeds = seeds_data(inputs.runs, impls, catalogue_dir)
    return {
        "impls": [{"name": n, "ops": n in inputs.ops, "support": n in inputs.support,
                   "runs": [r["lane"] for r in runs if r["impl"] == n]} for n in impls],
        "ops": ops_data(inputs, impls),
        "support": support_data(inputs, impls),
        "support_statuses": SUPPORT_STATUSES,
        "runs": runs,
        "contracts": contracts,
        "outcomes": OUTCOMES,
        "seeds": seeds,
        "overview": {n: _overview(n, inputs, seeds) for n in impls},
        "history": history_data(inputs) if inputs.history else [],
        "history_given": bool(inputs.history),
        "chart_outcomes": _CHART_OUTCOMES,
        "skipped": [{"path": p, "why": w} for p, w in inputs.skipped],
        "sources": {"ops": inputs.ops_sources, "support": inputs.support_sources},
    }


def _overview(name: str, inputs: Inputs, seeds: dict[str, Any]) -> dict[str, Any]:
    """An implementation's seed verdicts (``None``: no run) and support statuses (``None``: no matrix)."""
    verdicts = None
    if name in seeds["runs"]:
        verdicts = {v: sum(s["verdicts"][name][v] for s in seeds["seeds"]) for v in seeds["verdicts"]}
    support = None
    if name in inputs.support:
        statuses = [r.status for r in inputs.support[name]]
        support = {st: statuses.count(st) for st in _ordered(SUPPORT_STATUSES, statuses)}
    return {"seeds": verdicts, "support": support}


def script_json(data: Any) -> str:
    """``data`` as JSON that is safe inside ``<script type="application/json">``: no ``<``, ``>``
    or ``&`` in it (each written as its ``\\u`` escape, which JSON.parse reads back), so no text can
    close the element or open a comment."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    for ch in "<>&\u2028\u2029":
        text = text.replace(ch, f"\\u{ord(ch):04x}")
    return text


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["slug"] = lambda s: "".join(ch if ch.isalnum() else "-" for ch in str(s)).strip("-").lower()
    return env


def render(data: dict[str, Any], generated: str | None = None) -> str:
    """``index.html`` of :func:`shape`'s ``data``."""
    generated = generated or datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    page_data = {"impls": [i["name"] for i in data["impls"]], "ops": data["ops"]}
    return _environment().get_template("index.html.j2").render(
        **data, generated=generated, page_json=markupsafe.Markup(script_json(page_data)))


def write(out: Path, data: dict[str, Any], generated: str | None = None) -> Path:
    """The page and its static files in ``out`` (created); returns the page's path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for path in STATIC.iterdir():
        if path.is_file():
            shutil.copyfile(path, out / path.name)
    page = out / "index.html"
    page.write_text(render(data, generated), encoding="utf-8")
    return page
