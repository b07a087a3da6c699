"""The runtime rank: a tensor input of every forward, and in-graph helpers that derive from it.

The runner passes ``rank=rank_tensor()`` to the model. Because it is a tensor, Dynamo makes it a
graph input instead of a constant, so the traced graph is the same on every rank; per-rank values
(tensor-parallel rank, expert-parallel rank, shard offsets) are computed from it inside the graph.
Degrees (tp, ep, world) are static and the same on every rank, so they may be Python ints.
"""

from __future__ import annotations

import torch

RANK_DTYPE = torch.int64


def rank_tensor(rank: int | None = None) -> torch.Tensor:
    """This process's rank as a 0-d int64 tensor (``torch.distributed`` rank when not given)."""
    if rank is None:
        from reference.core.settings import get_rank

        rank = get_rank()
    return torch.tensor(int(rank), dtype=RANK_DTYPE)


def get_neuron_tp_rank(rank: torch.Tensor, tp_degree: int) -> torch.Tensor:
    """Tensor-parallel rank of a contiguous TP layout: ``rank % tp``."""
    return rank % tp_degree


def get_neuron_ep_rank(rank: torch.Tensor, ep_degree: int, tp_degree: int = 1) -> torch.Tensor:
    """Expert-parallel rank when TP groups nest inside EP groups: ``(rank % (ep * tp)) // tp``."""
    return torch.div(rank % (ep_degree * tp_degree), tp_degree, rounding_mode="floor")


def ep_rank_id(rank: torch.Tensor, ep_degree: int, tp_degree: int = 1) -> torch.Tensor:
    """The ``[1, 1]`` int32 expert-parallel rank id, computed in the graph (never a literal)."""
    return get_neuron_ep_rank(rank, ep_degree, tp_degree).view(1, 1).to(torch.int32)


def shard_indices(rank_in_group: torch.Tensor, shard: int) -> torch.Tensor:
    """``arange(shard) + rank_in_group * shard``: the indices of this rank's shard, as a tensor."""
    start = rank_in_group.reshape(()).to(torch.int64) * shard
    return torch.arange(shard, device=rank_in_group.device, dtype=torch.int64) + start


def select_shard(x: torch.Tensor, dim: int, rank_in_group: torch.Tensor, shard: int) -> torch.Tensor:
    """``x`` narrowed to this rank's shard along ``dim`` with ``index_select`` (a static slice
    ``x[..., r * shard:(r + 1) * shard]`` would bake ``r`` into the graph)."""
    return x.index_select(dim, shard_indices(rank_in_group, shard))
