"""Expectation files: the tests an implementation is known to fail, each with the reason.

One entry a line, ``<test id>  # <reason>``; the test id is pytest's node id as printed by
``pytest -rA`` without the directory (``test_backend_contract.py::test_x[param]``), so the file
works whichever way the suite was collected. Blank lines and lines starting with ``#`` are
comments. A reason is required: an entry without one is a usage error naming the line.

The plugin marks each listed test as an expected failure (strict: a listed test that passes fails
the run) and reports entries that match no test of a module that ran as stale.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterable

import pytest


@dataclasses.dataclass(frozen=True)
class Entry:
    nodeid: str
    reason: str
    line: int


@dataclasses.dataclass(frozen=True)
class Expectations:
    path: str | None
    entries: tuple[Entry, ...]

    @classmethod
    def empty(cls) -> "Expectations":
        return cls(None, ())

    def reason_for(self, nodeid: str) -> str | None:
        key = _key(nodeid)
        for e in self.entries:
            if e.nodeid == key:
                return e.reason
        return None

    def stale(self, results: Iterable[str]) -> list[Entry]:
        """Entries whose module ran but which match none of the tests that ran (``results``: node ids)."""
        ran = {_key(n) for n in results}
        modules = {k.split("::", 1)[0] for k in ran}
        return [e for e in self.entries if e.nodeid.split("::", 1)[0] in modules and e.nodeid not in ran]


def _key(nodeid: str) -> str:
    path, sep, rest = nodeid.partition("::")
    return Path(path).name + sep + rest


def parse(text: str, path: str = "<expectations>") -> Expectations:
    entries = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        nodeid, sep, reason = line.partition("#")
        nodeid, reason = nodeid.strip(), reason.strip()
        if not sep or not reason:
            raise pytest.UsageError(f"{path}:{number}: {nodeid!r} has no reason; write '<test id>  # <why it fails>'")
        if "::" not in nodeid:
            raise pytest.UsageError(f"{path}:{number}: {nodeid!r} is not a test id (test_module.py::test_name)")
        entries.append(Entry(_key(nodeid), reason, number))
    return Expectations(path, tuple(entries))


def load(path: str) -> Expectations:
    p = Path(path)
    if not p.is_file():
        raise pytest.UsageError(f"expectation file {path} does not exist")
    return parse(p.read_text(encoding="utf-8"), str(p))
