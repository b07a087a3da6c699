"""The mesh registry without processes: partitions, channel ids, and unknown groups."""

from __future__ import annotations

import pytest

from reference.spmd.errors import MeshError
from reference.spmd.mesh import MeshRegistry, validate_partition


@pytest.mark.spec("002.collectives.full-mesh-registered")
def test_partition_is_canonical_and_checked():
    assert validate_partition([[0, 1], [2, 3]], 4) == ((0, 1), (2, 3))
    with pytest.raises(MeshError, match="not a partition"):
        validate_partition([[0, 1]], 4)  # only this rank's group: not the full mesh
    with pytest.raises(MeshError, match="not a partition"):
        validate_partition([[0, 1], [1, 2]], 3)
    with pytest.raises(MeshError, match="same size"):
        validate_partition([[0, 1, 2], [3]], 4)


@pytest.mark.spec("002.collectives.full-mesh-registered")
def test_each_rank_registers_its_own_group_name_and_gets_the_same_mesh():
    # Rank 0 sees the TP pair [0, 1] as group "1"; rank 2 sees [2, 3] as group "2".
    rank0, rank2 = MeshRegistry(), MeshRegistry()
    m0 = rank0.register([[0, 1], [2, 3]], ["1"], name="tp")
    m2 = rank2.register([[0, 1], [2, 3]], ["2"], name="tp")
    assert m0 == m2
    assert rank0.resolve("1") == rank2.resolve("2") == m0
    assert m0.replica_groups == ((0, 1), (2, 3)) and m0.channel_id == 1


@pytest.mark.spec("002.collectives.channel-id-invariant")
def test_same_partition_reuses_its_channel_id_and_new_ones_get_the_next():
    reg = MeshRegistry()
    tp = reg.register([[0, 1], [2, 3]], ["1"])
    dp = reg.register([[0, 2], [1, 3]], ["3"])
    again = reg.register([[0, 1], [2, 3]], ["5"])
    assert (tp.channel_id, dp.channel_id, again.channel_id) == (1, 2, 1)
    assert reg.resolve("5") is tp


def test_unknown_group_says_how_to_register_it():
    with pytest.raises(MeshError, match="NeuronGroupCoordinator"):
        MeshRegistry().resolve("7")
    with pytest.raises(MeshError, match="channel 3"):
        MeshRegistry().local_group(3)
