"""The support matrix: what a run observed, checked against what the implementation declares.

Probe tests (``conformance/tests/test_backend_support.py``) each try one parameter, API, graph-break rule,
environment variable or helper symbol against the implementation and record what they saw with
:meth:`Recorder.record`: a status (:data:`STATUSES`) and a note saying what the probe did and what
happened. The implementation declares the status it expects for every row
(:meth:`~conformance.harness.implementation.Implementation.expected_support`; the reference declares the
seeds' table): an observation that disagrees fails the probe naming the row, and so does a row the
declaration leaves out. Without any declaration the probes still observe and fill the report, but
each is reported as a skip saying its status was not asserted.

The observations travel on the test reports (``user_properties``, so they cross ``pytest -n``
workers), and at the end of the run the plugin calls :func:`render` to write
``support.md`` with the backend reference's columns. A probe the implementation could not run
(``NotSupported``) becomes ``Unsupported`` with the adapter's reason; a probe that crashed becomes
``Unknown`` with the error, so a broken probe is visible rather than hidden.

Row names come from the probes themselves; :data:`TABLES` only fixes the order and the titles of
the tables.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from typing import Any, Iterable

import pytest

from conformance.harness import env
from conformance.harness.evidence import Evidence
from conformance.harness.implementation import Implementation, NotSupported
from conformance.harness.outcomes import EVIDENCE, EVIDENCE_PROPERTY, FELL_BACK_PROPERTY

SUPPORTED = "Supported"
UNSUPPORTED = "Unsupported"
PARTIAL = "Partial"
UNKNOWN = "Unknown"
#: Observed, never declared: the probe's work ran outside the implementation's compiled path.
FELL_BACK = "Fell back"
STATUSES = (SUPPORTED, UNSUPPORTED, PARTIAL)

PROPERTY = "conformance_support"

#: table key -> (title, first column)
#: Tables whose probes compile through the backend: a Supported row there needs a graph the
#: implementation compiled (see :meth:`Recorder.record`).
COMPILING_TABLES = frozenset({"parameters", "apis"})

#: Tables whose rows only make sense for a Neuron-style backend (its forced graph breaks, its
#: variables, its helper API); reports show them apart from the general rows.
NEURON_TABLES = frozenset({"graph_breaks", "variables", "helper_api"})

TABLES: dict[str, tuple[str, str]] = {
    "parameters": ("torch.compile parameters", "Parameter"),
    "apis": ("torch.compiler APIs", "API"),
    "graph_breaks": ("Graph breaks", "Operation"),
    "variables": ("Environment variables", "Variable"),
    "helper_api": ("Backend helper API", "Symbol"),
}


def support_marker(table: str, item: str):
    """``@support_marker("parameters", "fullgraph")``: the row a probe test fills."""
    if table not in TABLES:
        raise ValueError(f"unknown support table {table!r}; known: {sorted(TABLES)}")
    return pytest.mark.support(table, item)


def declared(impl: Implementation) -> dict[str, dict[str, str]] | None:
    """The matrix ``impl`` declares (table -> row -> status), or ``None`` when it declares none
    (raises NotSupported or answers ``{}``)."""
    try:
        matrix = impl.backend().expected_support()
    except NotSupported:
        return None
    if not matrix:
        return None
    bad = {(t, r): v for t, rows in matrix.items() for r, v in rows.items() if v not in STATUSES}
    if bad:
        raise ValueError(f"{impl.name}: expected_support() has statuses outside {STATUSES}: {bad}")
    return {t: dict(rows) for t, rows in matrix.items()}


def declared_status(impl: Implementation, table: str, item: str) -> str | None:
    """The status ``impl`` declares for one row; ``None`` when it declares none for it."""
    matrix = declared(impl)
    return None if matrix is None else matrix.get(table, {}).get(item)


class Recorder:
    """Handed to a probe test (fixture ``support``); :meth:`record` stores the observation and
    asserts it against the implementation's declared status for the row."""

    def __init__(self, node: pytest.Item, impl: Implementation, table: str, item: str) -> None:
        self._node = node
        self._impl = impl
        self.table = table
        self.item = item
        self.recorded = False

    def record(self, status: str, notes: str, *, expects_fallback: bool = False, compiles: bool | None = None,
               runs_a_copy: bool = False) -> None:
        """Store the observation and assert it. A Supported or Partial row whose probe's work ran
        outside the implementation's compiled path (its evidence) is recorded as :data:`FELL_BACK`
        instead, unless ``expects_fallback``: the row is about running eagerly (the fallback
        variable, compile-only mode). ``compiles``: the probe hands the backend at least one graph,
        so a probe whose graphs never reached it fell back (default: the rows of
        :data:`COMPILING_TABLES`); ``False`` for a probe that by design compiles nothing.
        ``runs_a_copy``: the probe runs a saved and reloaded copy of the compiled graph, so the
        runs of what the backend returned are not asked for."""
        if status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
        matrix = declared(self._impl)
        want = None if matrix is None else matrix.get(self.table, {}).get(self.item)
        notes = " ".join(notes.split())
        ev = self._node.stash.get(EVIDENCE, None)
        evidence = None
        if ev is not None:
            evidence = ev.refresh().as_dict()
            reason = None
            if status in (SUPPORTED, PARTIAL) and not expects_fallback:
                required = self.table in COMPILING_TABLES if compiles is None else compiles
                reason = ev.shortfall(require_compile=required, require_run=not runs_a_copy)
            if reason is not None:  # never Supported on work that did not run compiled
                status, notes = FELL_BACK, f"fell back: {reason}. {notes}"
                self._node.user_properties.append((FELL_BACK_PROPERTY, reason))
        payload = {"table": self.table, "item": self.item, "status": status, "notes": notes, "declared": want,
                   "evidence": evidence}
        self._node.user_properties.append((PROPERTY, json.dumps(payload)))
        self.recorded = True
        row = f"support row {self.table}/{self.item!r}"
        if matrix is None:
            pytest.skip(f"{row}: observed {status}; {self._impl.name} declares no support matrix "
                        "(expected_support), so the status is not asserted")
        if want is None:
            pytest.fail(f"{row}: observed {status}, but {self._impl.name} declares no status for it "
                        f"(add it to expected_support): {notes}", pytrace=False)
        if want != status:
            pytest.fail(f"{row}: declared {want}, observed {status}: {notes}", pytrace=False)


def observation_from_report(report: pytest.TestReport) -> dict[str, Any] | None:
    """The observation a probe recorded, or one made from a skip or a crash; ``None`` otherwise."""
    marker = dict(report.user_properties).get(PROPERTY) if report.user_properties else None
    if marker is not None and report.when == "call":
        return json.loads(marker)
    row = dict(report.user_properties).get("conformance_support_row")
    if row is None or report.when == "teardown":
        return None
    table, item = json.loads(row)
    observed = dict(report.user_properties).get(EVIDENCE_PROPERTY)
    evidence = json.loads(observed) if observed else None
    if report.skipped:
        reason = ""
        if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
            reason = str(report.longrepr[2]).removeprefix("Skipped: ")
        return {"table": table, "item": item, "status": UNSUPPORTED, "notes": reason, "evidence": evidence}
    if report.failed:
        # The exception's own message, not the traceback's last line (a file:line that differs
        # between machines and would make the checked-in matrices drift).
        crash = getattr(getattr(report.longrepr, "reprcrash", None), "message", None)
        text = (crash or report.longreprtext or "").strip().splitlines()
        return {"table": table, "item": item, "status": UNKNOWN, "notes": "probe failed: " + (text[0][:200] if text else ""),
                "evidence": evidence}
    return None


def evidence_cell(evidence: dict[str, Any] | None) -> str:
    """The support matrix's evidence column: graphs the implementation compiled or served (or,
    where it reports none, graphs Dynamo handed it) and runs of its compiled path (or of the
    callables it returned), plus fallbacks. Counts that do not depend on a cache being warm, so a
    checked-in matrix does not drift between runs."""
    if not evidence:
        return "—"
    ev = Evidence.from_dict(evidence)
    graphs = ev.served() if ev.served() is not None else ev.graphs
    runs = ev.ran if ev.ran is not None else ev.backend_runs
    text = f"{graphs or 0} compiled / {runs or 0} run"
    if ev.fallbacks:
        text += f", {len(ev.fallbacks)} fell back"
    return text


def _add_evidence(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    if not a or not b:
        return a or b
    out = dict(a)
    for k, v in b.items():
        if k == "fallbacks":
            out[k] = list(a.get(k) or []) + list(v or [])
        elif isinstance(v, int) or isinstance(a.get(k), int):
            out[k] = (a.get(k) or 0) + (v or 0) if (a.get(k) is not None or v is not None) else None
    return out


def merge(observations: Iterable[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """One observation per row; several probes of one row combine (any failure wins, then the
    weakest status: Unknown < Unsupported < Partial < Supported), notes joined."""
    rank = {UNKNOWN: 0, FELL_BACK: 0.5, UNSUPPORTED: 1, PARTIAL: 2, SUPPORTED: 3}
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for obs in observations:
        key = (obs["table"], obs["item"])
        if key not in rows:
            rows[key] = dict(obs)
            continue
        cur = rows[key]
        cur["evidence"] = _add_evidence(cur.get("evidence"), obs.get("evidence"))
        if FELL_BACK in (cur["status"], obs["status"]):
            cur["status"] = FELL_BACK if UNKNOWN not in (cur["status"], obs["status"]) else UNKNOWN
            if obs["notes"] and obs["notes"] not in cur["notes"]:
                cur["notes"] = (cur["notes"] + " " + obs["notes"]).strip()
            continue
        if cur["status"] != obs["status"]:
            if rank[obs["status"]] < rank[cur["status"]] and {cur["status"], obs["status"]} != {SUPPORTED, UNSUPPORTED}:
                cur["status"] = obs["status"]
            elif {cur["status"], obs["status"]} == {SUPPORTED, UNSUPPORTED}:
                cur["status"] = PARTIAL
        if obs["notes"] and obs["notes"] not in cur["notes"]:
            cur["notes"] = (cur["notes"] + " " + obs["notes"]).strip()
    return rows


def portable(text: str) -> str:
    """``text`` with the paths that depend on the machine or the user written as a user would
    write them: the temporary directory as ``$TMPDIR``, the cache home as ``$XDG_CACHE_HOME``, the
    home directory as ``~`` and a numeric user id in a folder name as ``<uid>``. A matrix made on
    another machine, by another user or with another ``TMPDIR`` then reads the same."""
    subs = {tempfile.gettempdir(): "$TMPDIR", os.path.expanduser("~"): "~"}
    if env.xdg_cache_home():
        subs[env.xdg_cache_home()] = "$XDG_CACHE_HOME"
    for real, shown in sorted(subs.items(), key=lambda kv: -len(kv[0])):
        real = real.rstrip("/")
        if real and real != "~":
            text = re.sub(re.escape(real) + r"(?=[/'\"`\s,;)]|$)", lambda _m, shown=shown: shown, text)
    if hasattr(os, "getuid"):
        uid = re.compile(rf"(?<=[-_/]){os.getuid()}(?=[/'\"`\s,;)]|$)")
        text = re.sub(r"(?:\$TMPDIR|\$XDG_CACHE_HOME|~)?/[^\s'\"`,;)]*", lambda m: uid.sub("<uid>", m.group(0)), text)
    return text


#: The first word of the line that holds the machine facts: ``conformance.reporting.support_docs`` leaves
#: that line out of the checked-in matrices, so they read the same whichever machine made them.
MACHINE_PREFIX = "Machine:"


def machine_line(machine: dict[str, str]) -> str:
    facts = ", ".join(f"{k} `{v}`" for k, v in machine.items()) or "(none reported)"
    return f"{MACHINE_PREFIX} {facts} (facts about this run, not part of the matrix)"


def render(
    implementation: str,
    versions: dict[str, str],
    observations: Iterable[dict[str, Any]],
    order: list[tuple[str, str]] | None = None,
    *,
    machine: dict[str, str] | None = None,
) -> str:
    """Markdown for ``support.md``: one table per :data:`TABLES` entry, rows in probe order.
    ``versions`` are compared wherever a matrix is; ``machine`` (host, cores) goes on a line of
    its own that the checked-in copies leave out."""
    rows = merge(observations)
    order = [k for k in (order or []) if k in rows] + sorted(k for k in rows if k not in (order or []))
    lines = [
        f"# Support matrix: {implementation}",
        "",
        "Made from the probes of this run (`conformance/tests/test_backend_support.py`); every status below "
        "is what the probe observed, not a copy of the documentation.",
        "",
        "Versions: " + (", ".join(f"{k} `{v}`" for k, v in versions.items()) or "(none reported)"),
    ]
    if machine is not None:
        lines.append(machine_line(machine))
    neuron_heading = False
    for table, (title, first) in TABLES.items():
        keys = [k for k in order if k[0] == table]
        if not keys:
            continue
        if table in NEURON_TABLES and not neuron_heading:
            neuron_heading = True
            lines += ["", "# Neuron-specific rows", "",
                      "The rows below describe what only a Neuron-style backend has (its forced graph breaks, "
                      "variables and helper API); another backend reads Unsupported here by design."]
        lines += ["", f"## {title}", "", f"| {first} | Status | Evidence | Notes |", "|---|---|---|---|"]
        for key in keys:
            r = rows[key]
            notes = portable(r["notes"]).replace("|", "\\|")
            lines.append(f"| `{key[1]}` | {r['status']} | {evidence_cell(r.get('evidence'))} | {notes} |")
    return "\n".join(lines) + "\n"


# --- plugin glue (called from conformance/plugin.py) -----------------------------------------------

ROW_PROPERTY = "conformance_support_row"


def setup_item(item: pytest.Item, index: int) -> None:
    """Tag a probe's reports with its row and collection index, so a skip or a crash still lands
    in the matrix, in probe order."""
    marker = item.get_closest_marker("support")
    if marker is None:
        return
    table, name = marker.args
    if not any(k == ROW_PROPERTY for k, _ in item.user_properties):
        item.user_properties.append((ROW_PROPERTY, json.dumps([table, name])))
        item.user_properties.append(("conformance_support_order", str(index)))


class Collected:
    """Observations gathered on the controller, with the probes' collection order."""

    def __init__(self) -> None:
        self.observations: list[dict[str, Any]] = []
        self._order: dict[tuple[str, str], int] = {}

    def add(self, report: pytest.TestReport) -> None:
        obs = observation_from_report(report)
        if obs is None:
            return
        self.observations.append(obs)
        props = dict(report.user_properties)
        key = (obs["table"], obs["item"])
        index = int(props.get("conformance_support_order", 10**6))
        self._order[key] = min(index, self._order.get(key, index))

    def order(self) -> list[tuple[str, str]]:
        return sorted(self._order, key=lambda k: self._order[k])


@pytest.fixture
def support(request: pytest.FixtureRequest) -> Recorder:
    """The recorder of a probe test marked ``@pytest.mark.support(table, item)``."""
    marker = request.node.get_closest_marker("support")
    if marker is None:
        raise pytest.UsageError(f"{request.node.nodeid} uses the support fixture without a support marker")
    table, item = marker.args
    return Recorder(request.node, request.getfixturevalue("impl"), table, item)
