"""The op lane's edge variant in the op table: each row's verdict on its samples re-drawn at the
edges of its dtype (``CONFORMANCE_OPS_EDGES=1``, ``conformance/tests/test_ops_edges.py``), beside
its verdict on OpInfo's own samples.

The variant's verdicts sit in ``op-verdicts-edges/`` of the lane's report directory; when any are
there, :mod:`conformance.reporting.ops_table` gives each row of ``ops.json`` an ``edges`` field
(the verdict at the edges) and appends the section :func:`render` writes to ``ops.md``: the counts
per dtype and every row whose verdict at the edges is not *matches*, with the sample and the known
cause (``conformance/expected/ops/<impl>-edges.txt``).
"""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any, Callable

from conformance.harness.opinfo import DTYPES, VERDICTS

VARIANT = "edges"


def collect(directory: Path, clean: Callable[[str], str]) -> list[dict[str, Any]]:
    """The variant's verdicts (``[]`` when it did not run), their details cleaned by ``clean``."""
    rows = []
    for path in sorted(Path(directory).glob("*.json")) if Path(directory).is_dir() else ():
        row = json.loads(path.read_text(encoding="utf-8"))
        row["detail"] = clean(row["detail"])
        row.pop("evidence", None)
        rows.append(row)
    return rows


def build(rows: list[dict[str, Any]], edge_rows: list[dict[str, Any]], known: dict[tuple[str, str], str]) -> dict[str, Any]:
    """The variant's part of the table; each of ``rows`` (the table's) gains ``edges``, its verdict
    at the edges, where the variant ran it."""
    by_key = {(r["entry"], r["dtype"]): r for r in edge_rows}
    for r in rows:
        edge = by_key.get((r["entry"], r["dtype"]))
        if edge is not None:
            r["edges"] = edge["verdict"]
    ordinary = {(r["entry"], r["dtype"]): r["verdict"] for r in rows}
    listed = []
    for r in sorted(edge_rows, key=lambda r: (VERDICTS.index(r["verdict"]), r["entry"], DTYPES.index(r["dtype"]))):
        cause = known.get((r["entry"], r["dtype"]))
        listed.append({**r, "ordinary": ordinary.get((r["entry"], r["dtype"]), ""), **({"known": cause} if cause else {})})
    per_dtype = {d: dict(collections.Counter(r["verdict"] for r in edge_rows if r["dtype"] == d)) for d in DTYPES}
    counts = collections.Counter(r["verdict"] for r in edge_rows)
    return {"rows": listed, "counts": {v: counts.get(v, 0) for v in VERDICTS},
            "per_dtype": {d: c for d, c in per_dtype.items() if c}}


def _cell(text: str) -> str:
    text = text.replace("|", "\\|")
    return text if len(text) <= 160 else text[:157] + "..."


def render(part: dict[str, Any]) -> str:
    lines = [
        "", "## At the edges of each dtype (CONFORMANCE_OPS_EDGES=1)", "",
        f"{len(part['rows'])} rows run again with their samples' tensors of the row's dtype re-drawn at its edges "
        "(floats: values near the max and the bottom of the normal range of the dtype it is declared computed in, "
        "inf, -inf, nan and -0.0 among ordinary values; int64: values near its bounds; bool has none), "
        "compared with eager under the row's tolerance (conformance/harness/edges.py).",
        "",
        "| verdict at the edges | " + " | ".join(DTYPES) + " | all |",
        "|---|" + "---|" * (len(DTYPES) + 1),
    ]
    for v in VERDICTS:
        cells = [str(part["per_dtype"].get(d, {}).get(v, 0)) for d in DTYPES]
        lines.append(f"| {v} | " + " | ".join(cells) + f" | {part['counts'][v]} |")
    differ = [r for r in part["rows"] if r["verdict"] != "matches"]
    lines += ["", "### Rows whose verdict at the edges is not matches", ""]
    if differ:
        lines += ["| entry | dtype | OpInfo samples | at the edges | detail | sample | known cause |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['entry']} | {r['dtype']} | {r['ordinary']} | {r['verdict']} | {_cell(r['detail'])} | "
                  f"{_cell(r['sample'])} | {_cell(r.get('known', ''))} |" for r in differ]
    else:
        lines.append("None.")
    return "\n".join(lines) + "\n"
