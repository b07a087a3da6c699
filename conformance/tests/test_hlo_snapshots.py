"""Contract: the StableHLO of every fixture, as reviewed text (one ``.mlir`` file per fixture).

A change in lowering shows up as a diff of these files in review; the first line of each file
summarises the op histogram and the ``@main`` signature and is compared on its own first. Update
them deliberately with ``pytest conformance/tests/test_hlo_snapshots.py --snapshot-update`` (only this
implementation's tree is written), and review with ``make snapshot-review BASE=<git ref>``.
"""

from __future__ import annotations

import pytest

import neuron_fixtures
from conformance.harness.snapshots import assert_mlir


@pytest.mark.parametrize("name", neuron_fixtures.names())
def test_stablehlo_snapshot(impl, snapshot, name):
    model, args = neuron_fixtures.build(name)
    graphs = impl.lower(model, args)
    text = "".join(f"// graph {i} of {len(graphs)}\n{g}" for i, g in enumerate(graphs))
    assert_mlir(snapshot, text)
