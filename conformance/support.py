"""The support matrix: what a run observed, checked against what the implementation declares.

Probe tests (``conformance/test_backend_support.py``) each try one parameter, API, graph-break rule,
environment variable or helper symbol against the implementation and record what they saw with
:meth:`Recorder.record`: a status (:data:`STATUSES`) and a note saying what the probe did and what
happened. The implementation declares the status it expects for every row
(:meth:`~conformance.implementation.Implementation.expected_support`; the reference declares the
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

from conformance.implementation import Implementation, NotSupported

SUPPORTED = "Supported"
UNSUPPORTED = "Unsupported"
PARTIAL = "Partial"
UNKNOWN = "Unknown"
STATUSES = (SUPPORTED, UNSUPPORTED, PARTIAL)

PROPERTY = "conformance_support"

#: table key -> (title, first column)
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
    """The matrix ``impl`` declares (table -> row -> status), or ``None`` when it declares none."""
    try:
        matrix = impl.expected_support()
    except NotSupported:
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

    def record(self, status: str, notes: str) -> None:
        if status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
        matrix = declared(self._impl)
        want = None if matrix is None else matrix.get(self.table, {}).get(self.item)
        notes = " ".join(notes.split())
        payload = {"table": self.table, "item": self.item, "status": status, "notes": notes, "declared": want}
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
    if report.skipped:
        reason = ""
        if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
            reason = str(report.longrepr[2]).removeprefix("Skipped: ")
        return {"table": table, "item": item, "status": UNSUPPORTED, "notes": reason}
    if report.failed:
        # The exception's own message, not the traceback's last line (a file:line that differs
        # between machines and would make the checked-in matrices drift).
        crash = getattr(getattr(report.longrepr, "reprcrash", None), "message", None)
        text = (crash or report.longreprtext or "").strip().splitlines()
        return {"table": table, "item": item, "status": UNKNOWN, "notes": "probe failed: " + (text[0][:200] if text else "")}
    return None


def merge(observations: Iterable[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """One observation per row; several probes of one row combine (any failure wins, then the
    weakest status: Unknown < Unsupported < Partial < Supported), notes joined."""
    rank = {UNKNOWN: 0, UNSUPPORTED: 1, PARTIAL: 2, SUPPORTED: 3}
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for obs in observations:
        key = (obs["table"], obs["item"])
        if key not in rows:
            rows[key] = dict(obs)
            continue
        cur = rows[key]
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
    if os.environ.get("XDG_CACHE_HOME"):
        subs[os.environ["XDG_CACHE_HOME"]] = "$XDG_CACHE_HOME"
    for real, shown in sorted(subs.items(), key=lambda kv: -len(kv[0])):
        real = real.rstrip("/")
        if real and real != "~":
            text = re.sub(re.escape(real) + r"(?=[/'\"`\s,;)]|$)", lambda _m, shown=shown: shown, text)
    if hasattr(os, "getuid"):
        uid = re.compile(rf"(?<=[-_/]){os.getuid()}(?=[/'\"`\s,;)]|$)")
        text = re.sub(r"(?:\$TMPDIR|\$XDG_CACHE_HOME|~)?/[^\s'\"`,;)]*", lambda m: uid.sub("<uid>", m.group(0)), text)
    return text


#: The first word of the line that holds the machine facts: ``conformance.support_docs`` leaves
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
        "Made from the probes of this run (`conformance/test_backend_support.py`); every status below "
        "is what the probe observed, not a copy of the documentation.",
        "",
        "Versions: " + (", ".join(f"{k} `{v}`" for k, v in versions.items()) or "(none reported)"),
    ]
    if machine is not None:
        lines.append(machine_line(machine))
    for table, (title, first) in TABLES.items():
        keys = [k for k in order if k[0] == table]
        if not keys:
            continue
        lines += ["", f"## {title}", "", f"| {first} | Status | Notes |", "|---|---|---|"]
        for key in keys:
            r = rows[key]
            notes = portable(r["notes"]).replace("|", "\\|")
            lines.append(f"| `{key[1]}` | {r['status']} | {notes} |")
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
