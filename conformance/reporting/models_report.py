"""The model lane's report: one row per model, written to ``reports/<impl>/models.md``.

Each test of ``conformance/tests/test_models.py`` records what it observed for one model and one part
of the lane (``forward``, ``decode``, ``generate``, ``bfloat16``) with :func:`record`; the rows
travel on the test reports' ``user_properties`` (so they cross ``pytest -n`` workers) and the
plugin hands every report to :class:`Collected`, then calls :func:`render` at the end of the run.
A test that failed before recording still shows up, as a failed part with the error.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

PROPERTY = "conformance_model"
ROW_PROPERTY = "conformance_model_row"
PARTS = ("forward", "decode", "generate", "bfloat16")


def tag(item: pytest.Item, model: str, part: str) -> None:
    """Mark a test's reports as the row ``model`` / ``part`` (so a crash still lands in the table)."""
    if part not in PARTS:
        raise ValueError(f"unknown model-lane part {part!r}; known: {PARTS}")
    item.user_properties.append((ROW_PROPERTY, json.dumps([model, part])))


def record(item: pytest.Item, model: str, part: str, **observed: Any) -> None:
    """What the part observed: ``ok`` (bool), ``graphs``, ``breaks`` (list of ``"op: reason"``),
    ``max_error``, ``first_call_s``, ``compile_s``, ``note``."""
    item.user_properties.append((PROPERTY, json.dumps({"model": model, "part": part, **observed})))


class Collected:
    def __init__(self) -> None:
        self.rows: dict[str, dict[str, dict[str, Any]]] = {}

    def add(self, report: pytest.TestReport) -> None:
        props = report.user_properties or []
        recorded = [json.loads(v) for k, v in props if k == PROPERTY]
        tagged = [json.loads(v) for k, v in props if k == ROW_PROPERTY]
        if report.when != "call" and not (report.failed and tagged):
            return
        for obs in recorded:
            part = self.rows.setdefault(obs["model"], {}).setdefault(obs["part"], {})
            part.update(obs)
            if report.failed:
                part["ok"] = False
        if report.failed and tagged and not recorded:
            model, part = tagged[0]
            text = (report.longreprtext or "").strip().splitlines()
            self.rows.setdefault(model, {})[part] = {"ok": False, "note": (text[-1][:160] if text else "failed")}
        if report.skipped and tagged:
            model, part = tagged[0]
            reason = str(report.longrepr[2]).removeprefix("Skipped: ") if isinstance(report.longrepr, tuple) else ""
            self.rows.setdefault(model, {}).setdefault(part, {"ok": None, "note": reason})


def _fmt_err(value: Any) -> str:
    return "-" if value is None else f"{value:.1e}"


def render(implementation: str, versions: dict[str, str], rows: dict[str, dict[str, dict[str, Any]]],
           features: dict[str, str] | None = None) -> str:
    lines = [
        f"# Model lane: {implementation}",
        "",
        "Small `transformers` architectures built offline from their config classes with seeded random weights "
        "(`neuron_fixtures/hf_models.py`), compiled through the adapter and compared with eager "
        "(`conformance/tests/test_models.py`). Parts: forward (float32); decode: prefill and one step on a static KV "
        "cache (float32); generate: greedy `generate()` of 8 tokens, compiled tokens equal to eager's; "
        "bfloat16: prefill and decode in bfloat16. `-` not run in this run (see the lane's make targets).",
        "",
        "Versions: " + (", ".join(f"{k} `{v}`" for k, v in versions.items()) or "(none reported)"),
        "",
        "| model | status | parts | graphs | breaks (op: reason) | max error fp32 | max error bf16 | first call (s) |",
        "|---|---|---|---:|---|---:|---:|---:|",
    ]
    for model in sorted(rows):
        parts = rows[model]
        ran = {p: v for p, v in parts.items() if v.get("ok") is not None}
        status = "pass" if ran and all(v["ok"] for v in ran.values()) else ("FAIL" if ran else "not run")
        marks = " ".join(f"{p} {'ok' if parts[p].get('ok') else ('-' if parts[p].get('ok') is None else 'FAIL')}"
                         for p in PARTS if p in parts)
        graphs = max((v.get("graphs") or 0 for v in ran.values()), default=0)
        breaks = sorted({b for v in ran.values() for b in v.get("breaks") or []})
        fp32 = [v.get("max_error") for p, v in ran.items() if p != "bfloat16" and v.get("max_error") is not None]
        bf16 = ran.get("bfloat16", {}).get("max_error")
        first = [v.get("first_call_s") for v in ran.values() if v.get("first_call_s") is not None]
        notes = [f"{p}: {v['note']}" for p, v in parts.items() if v.get("note") and v.get("ok") is False]
        cells = [
            f"`{model}`" + (f" ({features[model]})" if features and model in features else ""),
            status + ("; " + "; ".join(notes) if notes else ""),
            marks,
            str(graphs) if ran else "-",
            "; ".join(breaks) if breaks else ("none" if ran else "-"),
            _fmt_err(max(fp32) if fp32 else None),
            _fmt_err(bf16),
            f"{max(first):.1f}" if first else "-",
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    return "\n".join(lines) + "\n"
