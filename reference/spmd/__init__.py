"""SPMD compilation: the mesh registry, the runtime rank, collective lowering and the guard rails."""

from reference.spmd.errors import MeshError, RankConstantError, SplinterError, SPMDViolationError
from reference.spmd.mesh import MESH_REGISTRY, Mesh, MeshRegistry, NeuronGroupCoordinator
from reference.spmd.rank import ep_rank_id, get_neuron_ep_rank, get_neuron_tp_rank, rank_tensor, select_shard, shard_indices

__all__ = [
    "MESH_REGISTRY", "Mesh", "MeshError", "MeshRegistry", "NeuronGroupCoordinator", "RankConstantError",
    "SPMDViolationError", "SplinterError", "ep_rank_id", "get_neuron_ep_rank", "get_neuron_tp_rank",
    "rank_tensor", "select_shard", "shard_indices",
]
