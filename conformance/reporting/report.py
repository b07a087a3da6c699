"""The reports of one run of the suite, written by the plugin on the controller.

``<report dir>/<implementation>/<lane>/`` receives:

- ``summary.json`` (:data:`SCHEMA_VERSION`): the invocation, versions, declared precision,
  environment, totals per contract, every test with its outcome (``fell back`` among them),
  duration, failure or skip message and execution evidence, the support rows (observed and
  declared, with their evidence), per-graph compile times and stale expectation entries;
- ``summary.md``: the same for a person, leading with the failures and fallbacks by contract and
  the skips by reason, then the totals, the support matrix, the slowest tests and the
  compile-time chart;
- ``spec-coverage.json`` and ``spec-coverage.md``: each statement of the seeds met, failed, skipped
  or untested by this run (:mod:`conformance.reporting.spec_coverage`); ``summary.md`` shows the
  per-seed totals on its first screen;
- ``junit.xml``: the lane's tests for CI systems;
- ``support.md``: the support matrix in the backend reference's columns (:mod:`conformance.reporting.support`);
- ``compile-times.svg``: seconds per compiled graph, slowest first.

Every file is written atomically (a temporary name, then a rename).
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from conformance.harness import env
from conformance.harness.not_supported import NotSupported
from conformance.reporting import models_report, spec_coverage as _spec, support as _support
from conformance.harness.outcomes import FELL_BACK

#: 3: the 'fell back' outcome, each test's and support row's evidence, the declared precision.
SCHEMA_VERSION = 3
OUTCOMES = ("passed", "failed", FELL_BACK, "error", "skipped", "xfailed", "xpassed")
SLOWEST = 15
CHART_GRAPHS = 40


def write(
    out: Path, *, impl, suite, results: dict, support, compile_times: list, stale: list, environment: dict, models=None
) -> None:
    summary = summarize(impl, suite, results, support, compile_times, stale, environment)
    publish(out, summary, support.observations, support.order(), models.rows if models is not None else None)


def publish(out: Path, summary: dict, observations: list, order: list, model_rows: list | None = None) -> None:
    """Every report file of a lane from its ``summary`` (as :func:`summarize` makes it, or as
    :mod:`conformance.reporting.merge` joins several groups' into one) and the support observations
    it was made from, in probe order."""
    out.mkdir(parents=True, exist_ok=True)
    summary = dict(summary)
    coverage = _spec.coverage(_spec.load(), summary["tests"], summary["support"])
    summary["spec_coverage"] = {seed: {k: v for k, v in s.items() if k != "sections"} for seed, s in coverage["seeds"].items()}
    atomic_write(out / "spec-coverage.json", json.dumps(coverage, indent=1, sort_keys=True) + "\n")
    atomic_write(out / "spec-coverage.md", _spec.render(coverage, summary["implementation"], summary["lane"]))
    atomic_write(out / "summary.json", json.dumps(summary, indent=1, sort_keys=True) + "\n")
    atomic_write(out / "junit.xml", junit(summary))
    chart = compile_time_svg(summary["compile_times"])
    if chart:
        atomic_write(out / "compile-times.svg", chart)
    atomic_write(out / "summary.md", render_markdown(summary, chart_file="compile-times.svg" if chart else None))
    if observations:
        text = _support.render(summary["implementation"], summary["versions"], observations, order, machine=summary["machine"])
        atomic_write(out / "support.md", text)
    if model_rows:
        atomic_write(out / "models.md", models_report.render(summary["implementation"], summary["versions"], model_rows))


def tally(results: dict) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """The totals per outcome and per contract (a test module) of ``results`` (test id -> entry)."""
    totals = dict.fromkeys(OUTCOMES, 0)
    contracts: dict[str, dict[str, int]] = {}
    for nodeid, entry in results.items():
        totals[entry["outcome"]] += 1
        c = contracts.setdefault(_contract(nodeid), dict.fromkeys(OUTCOMES, 0))
        c[entry["outcome"]] += 1
    return totals, dict(sorted(contracts.items()))


def _precision(impl) -> str:
    """The declared precision in words; a declaration that cannot be read (already an error of the
    run, at collection or setup, naming the adapter's method) is reported as such, not raised again
    while the reports are written."""
    try:
        return impl.precision().describe()
    except (Exception, NotSupported) as exc:  # noqa: BLE001 - any failure of the adapter's method
        return f"not declared: {type(impl).__qualname__}.precision() failed ({type(exc).__name__}: {exc})"


def summarize(impl, suite, results: dict, support, compile_times: list, stale: list, environment: dict) -> dict[str, Any]:
    totals, contracts = tally(results)
    rows = _support.merge(support.observations)
    params = suite.config.invocation_params
    return {
        "schema_version": SCHEMA_VERSION,
        "implementation": impl.name,
        "spec": suite.spec,
        "lane": suite.lane,
        "invocation": {
            "args": list(params.args),
            "dir": str(params.dir),
            "python": sys.version.split()[0],
            "workers": env.xdist_worker_count() or _workers(suite.config),
            "strict_expectations": suite.strict,
            "expectations": suite.expectations().path,
        },
        "versions": impl.versions(),
        "machine": impl.machine(),
        "precision": _precision(impl),
        "environment": environment,
        "started": _iso(suite.started),
        "finished": _iso(time.time()),
        "wall_s": round(time.time() - suite.started, 1),
        "totals": totals,
        "contracts": contracts,
        "tests": [{"id": k, **v} for k, v in sorted(results.items())],
        "support": [
            {"table": t, "row": r, "status": v["status"], "declared": v.get("declared"), "notes": v["notes"],
             "evidence": v.get("evidence")}
            for (t, r), v in ((k, rows[k]) for k in support.order() + sorted(set(rows) - set(support.order())))
        ],
        "compile_times": sorted(compile_times, key=lambda x: -x["seconds"]),
        "stale_expectations": stale,
    }


def _workers(config) -> int | None:
    n = getattr(config.option, "numprocesses", None)
    return n if isinstance(n, int) else None


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(timespec="seconds")


def _cell(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return text.replace("|", "\\|")


PROBLEMS = ("failed", FELL_BACK, "error", "xpassed")
SKIP_TESTS_LISTED = 6


def _first_line(text: str, limit: int = 240) -> str:
    line = next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")
    return _cell(line, limit)


def _contract(test_id: str) -> str:
    return Path(test_id.split("::", 1)[0]).stem.removeprefix("test_")


def _problem_lines(summary: dict, lines: list[str]) -> None:
    """Failures and fallbacks, by contract, the worst outcome first."""
    problems = [x for x in summary["tests"] if x["outcome"] in PROBLEMS]
    lines += ["", f"## Failures and fallbacks ({len(problems)})", ""]
    if not problems:
        lines.append("None: every test that ran passed, was skipped with a reason, or failed as expected.")
    by_contract: dict[str, list[dict]] = {}
    for x in problems:
        by_contract.setdefault(_contract(x["id"]), []).append(x)
    for contract, tests in sorted(by_contract.items()):
        lines += [f"### {contract} ({len(tests)})", ""]
        for x in sorted(tests, key=lambda x: (PROBLEMS.index(x["outcome"]), x["id"])):
            reason = _first_line(x["message"]) or x["outcome"]
            if x["outcome"] == FELL_BACK:
                reason = reason.removeprefix("fell back: ")
            name = x["id"].partition("::")[2] or f"{x['id']} (the module, at collection)"
            lines.append(f"- **{x['outcome']}** `{name}`: {reason}")
        lines.append("")
    if lines[-1] == "":
        lines.pop()


def _skip_lines(summary: dict, lines: list[str]) -> None:
    """The skips, grouped by their reason."""
    skipped = [x for x in summary["tests"] if x["outcome"] == "skipped"]
    if skipped:
        reasons: dict[str, list[str]] = {}
        for x in skipped:
            reasons.setdefault(_first_line(x["message"], 200) or "(no reason given)", []).append(x["id"])
        lines += ["", f"## Skips by reason ({len(skipped)})", "", "| tests | reason | which |", "|---:|---|---|"]
        for reason, ids in sorted(reasons.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            shown = ", ".join(f"`{i}`" for i in sorted(ids)[:SKIP_TESTS_LISTED])
            more = f" and {len(ids) - SKIP_TESTS_LISTED} more" if len(ids) > SKIP_TESTS_LISTED else ""
            lines.append(f"| {len(ids)} | {reason} | {shown}{more} |")


def _contract_and_support_lines(summary: dict, lines: list[str]) -> None:
    """Totals per contract, then the support matrix's general and Neuron rows."""
    lines += ["", "## Totals per contract", "", "| contract | " + " | ".join(OUTCOMES) + " |",
              "|---|" + "---:|" * len(OUTCOMES)]
    for name, c in summary["contracts"].items():
        lines.append(f"| {name} | " + " | ".join(str(c.get(o, 0)) for o in OUTCOMES) + " |")
    if summary["support"]:
        general = [r for r in summary["support"] if r["table"] not in _support.NEURON_TABLES]
        neuron = [r for r in summary["support"] if r["table"] in _support.NEURON_TABLES]
        for title, rows in (("Support matrix: general rows", general),
                            ("Support matrix: Neuron-specific rows", neuron)):
            if not rows:
                continue
            lines += ["", f"## {title}", "", "| table | row | observed | declared | evidence | notes |",
                      "|---|---|---|---|---|---|"]
            for r in rows:
                flag = "" if r["declared"] in (None, r["status"]) else " ⚠"
                lines.append(f"| {r['table']} | `{r['row']}` | {r['status']}{flag} | {r['declared'] or '—'} | "
                             f"{_support.evidence_cell(r.get('evidence'))} | {_cell(r['notes'], 160)} |")


def render_markdown(summary: dict, chart_file: str | None = None) -> str:
    """``summary.md``: what needs attention first (failures and fallbacks by contract, one line
    each), then the skips by reason, the totals, the support matrix (general rows, then the
    Neuron-specific ones, with their evidence), the slowest tests and the compile-time chart."""
    t = summary["totals"]
    lines = [
        f"# Conformance: {summary['implementation']} (lane {summary['lane']})",
        "",
        f"Implementation `{summary['spec']}`; started {summary['started']}, {summary['wall_s']} s wall; "
        f"`pytest {' '.join(summary['invocation']['args'])}`.",
        "",
        "Versions: " + (", ".join(f"{k} `{v}`" for k, v in summary["versions"].items()) or "(none reported)"),
        "",
        _support.machine_line(summary.get("machine") or {}),
        "",
    ]
    precision = summary.get("precision")
    if precision:
        lines += [f"Precision: {precision}", ""]
    lines += ["**" + ", ".join(f"{t[o]} {o}" for o in OUTCOMES if t.get(o) or o in ("passed", "failed")) + "**"]
    if summary.get("spec_coverage"):
        lines += ["", "Seed statements (spec-coverage.md has each one):", "",
                  *_spec.totals_lines({"seeds": summary["spec_coverage"]})]

    _problem_lines(summary, lines)
    _skip_lines(summary, lines)
    _contract_and_support_lines(summary, lines)
    slow = sorted(summary["tests"], key=lambda x: -x["duration"])[:SLOWEST]
    if slow:
        lines += ["", f"## Slowest {len(slow)} tests", "", "| test | seconds | outcome |", "|---|---:|---|"]
        lines += [f"| `{x['id']}` | {x['duration']:.2f} | {x['outcome']} |" for x in slow]
    lines += ["", "## Compile time per graph", ""]
    if chart_file:
        times = summary["compile_times"]
        total = sum(x["seconds"] for x in times)
        lines += [f"{len(times)} graphs compiled, {total:.1f} s in all (seconds per graph, slowest first):", "",
                  f"![compile time per graph]({chart_file})"]
    else:
        lines.append("Not reported by this implementation (`graph_compile_times`), or no graph was compiled.")
    if summary["stale_expectations"]:
        lines += ["", "## Stale expectation entries", ""]
        lines += [f"- `{e['id']}`: {e['reason']}" for e in summary["stale_expectations"]]
    return "\n".join(lines) + "\n"


def junit(summary: dict) -> str:
    """JUnit XML: one ``testsuite`` for the lane, a ``testcase`` per test."""
    t = summary["totals"]
    suite = ET.Element(
        "testsuite",
        name=f"conformance-{summary['implementation']}-{summary['lane']}",
        tests=str(len(summary["tests"])),
        failures=str(t["failed"] + t[FELL_BACK] + t["xpassed"]),
        errors=str(t["error"]),
        skipped=str(t["skipped"] + t["xfailed"]),
        time=f"{sum(x['duration'] for x in summary['tests']):.3f}",
        timestamp=summary["started"],
    )
    props = ET.SubElement(suite, "properties")
    for k, v in [("implementation", summary["spec"]), ("lane", summary["lane"]), *summary["versions"].items()]:
        ET.SubElement(props, "property", name=str(k), value=str(v))
    for x in summary["tests"]:
        path, _, name = x["id"].partition("::")
        case = ET.SubElement(suite, "testcase", classname=Path(path).stem, name=name, time=f"{x['duration']:.3f}")
        kind = {"failed": "failure", FELL_BACK: "failure", "xpassed": "failure", "error": "error", "skipped": "skipped", "xfailed": "skipped"}.get(x["outcome"])
        if kind:
            first = x["message"].splitlines()[0] if x["message"] else x["outcome"]
            ET.SubElement(case, kind, message=first[:500]).text = x["message"]
    ET.indent(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"


def compile_time_svg(times: list[dict]) -> str:
    """A horizontal bar chart of seconds per compiled graph (the slowest :data:`CHART_GRAPHS`),
    labelled with the graph and the test; empty when nothing was reported."""
    if not times:
        return ""
    rows = sorted(times, key=lambda x: -x["seconds"])[:CHART_GRAPHS]
    top = max(r["seconds"] for r in rows) or 1.0
    label_w, bar_w, row_h, pad = 520, 360, 18, 8
    width, height = label_w + bar_w + 80, pad * 2 + row_h * (len(rows) + 1)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="monospace" font-size="11">',
        f'<text x="{pad}" y="{pad + 11}" font-weight="bold">compile time per graph (s), {len(rows)} of {len(times)} graphs</text>',
    ]
    for i, r in enumerate(rows, 1):
        y = pad + i * row_h
        label = f"{r['graph']}  ({r['test'].split('::', 1)[-1]})"
        label = label if len(label) <= 80 else label[:79] + "…"
        w = max(1.0, bar_w * r["seconds"] / top)
        out.append(f'<text x="{pad}" y="{y + 12}">{_xml(label)}</text>')
        out.append(f'<rect x="{label_w}" y="{y + 2}" width="{w:.1f}" height="{row_h - 5}" fill="#4878a8"/>')
        out.append(f'<text x="{label_w + w + 4:.1f}" y="{y + 12}">{r["seconds"]:.2f}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
