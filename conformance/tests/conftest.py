"""Fixtures of the conformance suite; they apply to the tests of this package only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.harness import snapshots
from conformance.harness.env import snapshot_dir
from conformance.harness.scratch import scratch_cache_variables
from conformance.harness.implementation import Implementation, NotSupported
from conformance.plugin import SUITE, TIMES_PROPERTY
from conformance.reporting.support import support  # noqa: F401  (the probes' recorder)
from conformance.harness.tolerances import POLICY, declared_precision

@pytest.fixture(scope="session")
def impl(pytestconfig: pytest.Config) -> Implementation:
    """The implementation under test."""
    return pytestconfig.stash[SUITE].impl()


@pytest.fixture(scope="session", autouse=True)
def _snapshot_tree(pytestconfig: pytest.Config, impl: Implementation) -> None:
    """Point the snapshot extensions at this implementation's tree (``docs/adapter.md``)."""
    root = pytestconfig.getoption("conformance_snapshot_dir") or snapshot_dir()
    root = root or impl.snapshot_root() or str(Path(pytestconfig.invocation_params.dir) / "conformance-snapshots")
    snapshots.set_tree(Path(root), impl.snapshots_of or impl.name)


@pytest.fixture(scope="session", autouse=True)
def _precision(impl: Implementation):
    """Tolerances follow the precision the implementation declares (conformance/harness/tolerances.py)."""
    with POLICY.use(declared_precision(impl)):
        yield


@pytest.fixture(scope="session")
def _cache_scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("conformance-cache")


@pytest.fixture(scope="module", autouse=True)
def _cache_variables(_cache_scratch: Path):
    """While a conformance module runs (its module fixtures included), the cache variables the
    caller did not set point into the session's scratch directory; restored after the module."""
    with scratch_cache_variables(_cache_scratch):
        yield


@pytest.fixture(autouse=True)
def _per_test(request: pytest.FixtureRequest, impl: Implementation):
    """Each test starts from a Dynamo with no compiled frames; afterwards the graphs it compiled and
    their compile times travel on its report (for the chart in ``summary.md``)."""
    impl.reset()
    yield
    try:
        times = impl.graph_compile_times()
    except NotSupported:
        return
    if times:
        request.node.user_properties.append((TIMES_PROPERTY, json.dumps([[str(g), float(s)] for g, s in times])))
