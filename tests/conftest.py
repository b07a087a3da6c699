"""Unit tests use caches of their own run, never the user's default caches.

A failure record or an artifact left in the default cache (``<tmp>/neuron-<uid>/neff_cache``) by an
earlier run (or by another project) would otherwise change what a test sees: a graph held back by
its failure record raises a different error than one that compiles. The directories are shared by
the run's workers (they sit beside the workers' own temporary directories), so compiled fixtures
are still reused within a run. A test that needs other directories sets them itself; variables the
caller set win.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.harness.scratch import scratch_cache_variables


@pytest.fixture(scope="session")
def _unit_cache_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.getbasetemp()
    # under xdist each worker's basetemp is popen-gwN inside the run's directory: share that one
    root = (base.parent if base.name.startswith("popen-gw") else base) / "unit-caches"
    root.mkdir(parents=True, exist_ok=True)
    return root


@pytest.fixture(scope="module", autouse=True)
def _unit_cache_variables(_unit_cache_root: Path):
    with scratch_cache_variables(_unit_cache_root):
        yield
