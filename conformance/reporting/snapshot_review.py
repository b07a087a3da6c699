"""Review the snapshot changes of a branch: ``python -m conformance.reporting.snapshot_review --base REF``.

Compares every snapshot file under the snapshot roots (default ``conformance/goldens``) in the
working tree with the same tree at the git revision ``REF``, and writes a Markdown page and an
HTML page (``reports/snapshot-review.md`` and ``.html`` by default) listing each added, changed
and removed snapshot, with, for ``.mlir`` files, the change of the op histogram and of the
``@main`` signatures, and the unified diff of every file. ``make snapshot-review BASE=<ref>`` runs
it; CI can attach the pages to a pull request.

Exit status 0 whether or not anything changed; 2 for a bad revision or root.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import difflib
import html
import re
import subprocess
import sys
from pathlib import Path

from conformance.harness.snapshots import SUMMARY_PREFIX, mlir_summary

SUFFIXES = (".mlir", ".json", ".txt")


@dataclasses.dataclass
class Change:
    path: str
    kind: str  # added | changed | removed
    before: str
    after: str

    def diff(self) -> list[str]:
        return list(difflib.unified_diff(
            self.before.splitlines(), self.after.splitlines(),
            f"a/{self.path}" if self.before else "/dev/null", f"b/{self.path}" if self.after else "/dev/null",
            lineterm="", n=2,
        ))


def _git(*args: str, cwd: Path) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"snapshot-review: git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def collect(repo: Path, base: str, roots: list[str]) -> list[Change]:
    """The snapshot files that differ between ``base`` and the working tree under ``roots``."""
    _git("rev-parse", "--verify", f"{base}^{{commit}}", cwd=repo)
    changes = []
    for root in roots:
        listed = _git("ls-tree", "-r", "--name-only", base, "--", root, cwd=repo).splitlines()
        old = {p for p in listed if p.endswith(SUFFIXES)}
        new = {str(p.relative_to(repo)) for p in (repo / root).rglob("*") if p.is_file() and p.suffix in SUFFIXES}
        for path in sorted(old | new):
            before = _git("show", f"{base}:{path}", cwd=repo) if path in old else ""
            after = (repo / path).read_text(encoding="utf-8") if path in new else ""
            if before != after:
                kind = "added" if path not in old else "removed" if path not in new else "changed"
                changes.append(Change(path, kind, before, after))
    return changes


def _body(text: str) -> str:
    return text.split("\n", 1)[1] if text.startswith(SUMMARY_PREFIX) else text


_HIST = re.compile(r"(\S+)=(\d+)")


def mlir_delta(change: Change) -> tuple[list[str], list[str]]:
    """(op histogram changes as ``op: a -> b``, signature lines that changed as ``-``/``+`` lines)."""
    def parts(text: str):
        if not text:
            return collections.Counter(), []
        summary = mlir_summary(_body(text))
        sigs, _, ops = summary.removeprefix(SUMMARY_PREFIX).partition(" | ops: ")
        return collections.Counter({k: int(v) for k, v in _HIST.findall(ops)}), [s for s in sigs.split(" ; ") if s]

    (h0, s0), (h1, s1) = parts(change.before), parts(change.after)
    ops = [f"{op}: {h0.get(op, 0)} -> {h1.get(op, 0)}" for op in sorted(set(h0) | set(h1)) if h0.get(op, 0) != h1.get(op, 0)]
    sigs = [f"- {s}" for s in s0 if s not in s1] + [f"+ {s}" for s in s1 if s not in s0]
    return ops, sigs


def render_markdown(base: str, changes: list[Change]) -> str:
    counts = collections.Counter(c.kind for c in changes)
    lines = [
        f"# Snapshot review against `{base}`",
        "",
        f"{counts['added']} added, {counts['changed']} changed, {counts['removed']} removed.",
    ]
    if not changes:
        return "\n".join(lines + ["", "No snapshot changed."]) + "\n"
    lines += ["", "| snapshot | change | ops | signature |", "|---|---|---|---|"]
    for c in changes:
        ops, sigs = mlir_delta(c) if c.path.endswith(".mlir") else ([], [])
        ops_cell = f"{len(ops)} op count(s) changed" if c.path.endswith(".mlir") else "—"
        lines.append(f"| `{c.path}` | {c.kind} | {ops_cell} | {'changed' if sigs else '—'} |")
    for c in changes:
        lines += ["", f"## {c.kind}: `{c.path}`", ""]
        if c.path.endswith(".mlir"):
            ops, sigs = mlir_delta(c)
            if ops:
                lines += ["Op histogram:", ""] + [f"- {o}" for o in ops] + [""]
            if sigs:
                lines += ["`@main` signature:", "", "```"] + sigs + ["```", ""]
        lines += ["```diff"] + c.diff() + ["```"]
    return "\n".join(lines) + "\n"


def render_html(base: str, changes: list[Change]) -> str:
    style = ("body{font-family:sans-serif;margin:2em} pre{background:#f6f8fa;padding:8px;overflow-x:auto} "
             ".a{background:#e6ffec} .d{background:#ffebe9} .h{color:#6e7781}")
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>Snapshot review</title><style>{style}</style></head><body>",
           f"<h1>Snapshot review against <code>{html.escape(base)}</code></h1>"]
    counts = collections.Counter(c.kind for c in changes)
    out.append(f"<p>{counts['added']} added, {counts['changed']} changed, {counts['removed']} removed.</p>")
    for c in changes:
        out.append(f"<h2>{c.kind}: <code>{html.escape(c.path)}</code></h2>")
        if c.path.endswith(".mlir"):
            ops, sigs = mlir_delta(c)
            if ops:
                out.append("<p>Op histogram:</p><ul>" + "".join(f"<li>{html.escape(o)}</li>" for o in ops) + "</ul>")
            if sigs:
                out.append("<p>@main signature:</p><pre>" + html.escape("\n".join(sigs)) + "</pre>")
        rows = []
        for line in c.diff():
            cls = "h" if line.startswith(("@@", "---", "+++")) else "a" if line.startswith("+") else "d" if line.startswith("-") else ""
            rows.append(f"<span class='{cls}'>{html.escape(line)}</span>" if cls else html.escape(line))
        out.append("<pre>" + "\n".join(rows) + "</pre>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="git revision to compare with (e.g. origin/main)")
    parser.add_argument("--root", action="append", default=None,
                        help="snapshot root relative to the repository (repeatable; default conformance/goldens)")
    parser.add_argument("--out", default="reports/snapshot-review.md", help="the Markdown page; the HTML page goes beside it")
    ns = parser.parse_args(argv)
    try:
        repo = Path(_git("rev-parse", "--show-toplevel", cwd=Path.cwd()).strip())
        changes = collect(repo, ns.base, ns.root or ["conformance/goldens"])
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_markdown(ns.base, changes), encoding="utf-8")
    out.with_suffix(".html").write_text(render_html(ns.base, changes), encoding="utf-8")
    print(f"snapshot-review: {len(changes)} snapshot(s) differ from {ns.base}; wrote {out} and {out.with_suffix('.html')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
