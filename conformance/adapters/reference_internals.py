"""The reference's internal modules, for the selfcheck's mutants to patch.

The selfcheck (:mod:`conformance.selfcheck.mutants`) breaks the reference one contract point at a
time by replacing a function inside it. Outside ``conformance/adapters/`` nothing of the suite
imports the reference (an import-linter contract in pyproject.toml), so the mutants reach its
modules through this door, by dotted name.
"""

from __future__ import annotations

import importlib
from types import ModuleType


def module(name: str) -> ModuleType:
    """``name`` (``reference`` or ``reference.<...>``), imported."""
    if name != "reference" and not name.startswith("reference."):
        raise ValueError(f"reference_internals.module({name!r}): not a module of the reference package")
    return importlib.import_module(name)
