"""Contract: the StableHLO of every fixture, as reviewed text (one ``.mlir`` file per fixture).

A change in lowering shows up as a diff of these files in review. Update them deliberately with
``pytest conformance/test_hlo_snapshots.py --snapshot-update``.
"""

from __future__ import annotations

import pytest

import neuron_fixtures
from conformance.snapshots import MlirSnapshotExtension


@pytest.fixture
def mlir_snapshot(snapshot):
    return snapshot.use_extension(MlirSnapshotExtension)


@pytest.mark.parametrize("name", neuron_fixtures.names())
def test_stablehlo_snapshot(impl, mlir_snapshot, name):
    model, args = neuron_fixtures.build(name)
    graphs = impl.lower(model, args)
    text = "".join(f"// graph {i} of {len(graphs)}\n{g}" for i, g in enumerate(graphs))
    assert text == mlir_snapshot
