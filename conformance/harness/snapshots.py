"""Single-file syrupy extensions: one ``.mlir``, ``.json`` or ``.txt`` file per test and implementation.

Each implementation keeps its own tree, ``<root>/<implementation>/<test module>/<test name>.<ext>``.
The root is ``--conformance-snapshot-dir`` (or ``CONFORMANCE_SNAPSHOT_DIR``), else what the adapter
names (:meth:`~conformance.harness.implementation.Implementation.snapshot_root`), else
``conformance-snapshots/`` in the directory pytest was started from, so an implementer keeps the
goldens in their own repository. Syrupy discovers snapshots from this implementation's tree only:
trees of other implementations beside it are neither reported unused nor touched by
``--snapshot-update``.

An ``.mlir`` snapshot starts with a one-line summary (:func:`mlir_summary`: the op histogram and
the ``@main`` signature of each module), which :func:`assert_mlir` compares on its own before the
whole text, so a change in what the lowering relies on reads as a one-line difference. JSON is
written one top-level key per line with compact values, so a diff shows the value that changed.
"""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path
from typing import Any

from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

_ROOT: dict[str, Path | None] = {"path": None}

SUMMARY_PREFIX = "// summary: "


def set_tree(root: Path, implementation: str) -> None:
    """Point every extension below at ``root/implementation`` (called once per session)."""
    _ROOT["path"] = Path(root) / implementation


def tree() -> Path:
    if _ROOT["path"] is None:
        raise RuntimeError("the conformance snapshot tree is set when the session's implementation loads")
    return _ROOT["path"]


class _PerImplementation(SingleFileSnapshotExtension):
    _write_mode = WriteMode.TEXT

    @classmethod
    def dirname(cls, *, test_location) -> str:
        return str(tree() / test_location.basename)


_OP = re.compile(r"^\s*(?:%[\w:#,% ]+=\s*)?\"?([a-z_]+\.[a-z_][\w.]*)\"?[\s({<]")
_MAIN = re.compile(r"func\.func (?:public )?@main\((.*?)\)(?: -> (.*?))? (?:attributes \{.*\} )?\{$")
_ARG = re.compile(r"%[\w]+: ")


def mlir_summary(text: str) -> str:
    """One line: the ``@main`` signature of each module (argument names dropped) and the histogram
    of operations (``dialect.op``, ``func.func`` and ``module`` excluded), sorted by name."""
    counts: collections.Counter[str] = collections.Counter()
    mains = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("//"):
            continue
        m = _MAIN.search(stripped)
        if m:
            args = _ARG.sub("", m.group(1))
            mains.append(f"@main({args}) -> {m.group(2) or '()'}")
            continue
        op = _OP.match(line)
        if op and op.group(1) not in ("func.func",):
            counts[op.group(1)] += 1
    ops = " ".join(f"{name}={n}" for name, n in sorted(counts.items()))
    return f"{SUMMARY_PREFIX}{' ; '.join(mains) or '(no @main)'} | ops: {ops or '(none)'}"


def _without_summary(text: str) -> str:
    return text.split("\n", 1)[1] if text.startswith(SUMMARY_PREFIX) else text


class MlirSnapshotExtension(_PerImplementation):
    file_extension = "mlir"

    def serialize(self, data: Any, **kwargs) -> str:
        if not isinstance(data, str):
            raise TypeError(f"an .mlir snapshot takes module text (str), got {type(data).__name__}")
        body = _without_summary(data)
        body = body if body.endswith("\n") else body + "\n"
        return f"{mlir_summary(body)}\n{body}"


class JsonSnapshotExtension(_PerImplementation):
    file_extension = "json"

    def serialize(self, data: Any, **kwargs) -> str:
        return dumps_compact(data)


class TextSnapshotExtension(_PerImplementation):
    file_extension = "txt"

    def serialize(self, data: Any, **kwargs) -> str:
        if not isinstance(data, str):
            raise TypeError(f"a .txt snapshot takes text, got {type(data).__name__}")
        return data if data.endswith("\n") else data + "\n"


def dumps_compact(data: Any) -> str:
    """JSON with sorted keys: a mapping one top-level key per line, each value on one line."""
    if not isinstance(data, dict) or not data:
        return json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n"
    lines = [f"{json.dumps(k)}:{json.dumps(v, sort_keys=True, separators=(',', ':'))}" for k, v in sorted(data.items())]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def assert_mlir(snapshot, text: str) -> None:
    """Compare ``text`` with its ``.mlir`` snapshot: first the summary line alone (so a changed op
    histogram or signature fails with that one line), then the whole text."""
    mlir = snapshot.use_extension(MlirSnapshotExtension)
    stored = _stored(mlir)
    if stored is not None and not snapshot.update_snapshots:
        want, got = stored.split("\n", 1)[0], mlir_summary(_without_summary(text))
        assert got == want, f"the lowering's summary changed:\n  snapshot: {want}\n  now:      {got}"
    assert text == mlir


def _stored(assertion) -> str | None:
    """The stored text of the snapshot ``assertion`` would compare with, if there is one."""
    location = assertion.extension.get_location(test_location=assertion.test_location, index=assertion.index)
    path = Path(location)
    return path.read_text(encoding="utf-8") if path.is_file() else None
