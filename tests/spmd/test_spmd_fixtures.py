"""The SPMD fixture layers in one process: the ``rank=None`` path and the runtime-rank path agree
bit for bit on every rank, the shards add up to the dense layer, and only the twins bake a constant.

``group=None`` makes each layer return its rank's partial result (no collective), so the ranks
can be simulated in one process; the real N-rank runs are in conformance/tests/test_spmd.py.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from neuron_fixtures.models import init_deterministic, seeded
from neuron_fixtures.spmd import (
    ColumnParallelLinear, ExpertParallelMoE, RowParallelLinear, ShardedDecoderLM, VocabParallelEmbedding, dense_moe,
    moe_decoder, prefill_inputs, sharded_decoder,
)
from reference.spmd import rank_tensor
from reference.spmd.guards import find_rank_constants, rank_placeholders

WORLD = 4
X = torch.randn(2, 3, 64, generator=seeded(5))
IDS = torch.randint(0, 128, (2, 5), generator=seeded(6))
LIN = init_deterministic(nn.Linear(64, 32), seed=7)
EMB = init_deterministic(nn.Embedding(128, 64), seed=8)
MOE = dense_moe()


def _layers(rank: int):
    return {
        "row_parallel": (RowParallelLinear(LIN, rank, WORLD, input_is_parallel=False), X),
        "vocab_parallel_embedding": (VocabParallelEmbedding(EMB, rank, WORLD), IDS),
        "expert_parallel_moe": (ExpertParallelMoE(MOE, rank, WORLD), X),
        "column_parallel": (ColumnParallelLinear(LIN, rank, WORLD), X),
    }


@pytest.mark.parametrize("rank", range(WORLD))
@pytest.mark.parametrize("name", ["row_parallel", "vocab_parallel_embedding", "expert_parallel_moe", "column_parallel"])
def test_rank_none_path_equals_runtime_rank_path_bit_for_bit(rank, name):
    layer, inp = _layers(rank)[name]
    with torch.no_grad():
        assert torch.equal(layer(inp), layer(inp, rank=rank_tensor(rank)))


def test_partial_results_add_up_to_the_dense_layers():
    with torch.no_grad():
        row = sum(_layers(r)["row_parallel"][0](X, rank=rank_tensor(r)) - LIN.bias for r in range(WORLD)) + LIN.bias
        torch.testing.assert_close(row, LIN(X))
        emb = sum(_layers(r)["vocab_parallel_embedding"][0](IDS, rank=rank_tensor(r)) for r in range(WORLD))
        torch.testing.assert_close(emb, EMB(IDS))
        moe = sum(_layers(r)["expert_parallel_moe"][0](X, rank=rank_tensor(r)) for r in range(WORLD))
        torch.testing.assert_close(moe, MOE(X))
        col = torch.cat([_layers(r)["column_parallel"][0](X) for r in range(WORLD)], dim=-1)
        torch.testing.assert_close(col, LIN(X))


def test_one_rank_sharded_decoder_is_the_dense_decoder():
    sharded, dense, local, full = sharded_decoder(0, 1)
    with torch.no_grad():
        assert torch.equal(sharded(*local, rank=rank_tensor(0)), dense(*full))


def test_bad_degrees_are_rejected():
    with pytest.raises(ValueError, match="divisible"):
        RowParallelLinear(LIN, 0, 3)
    with pytest.raises(ValueError, match="mode"):
        ShardedDecoderLM(moe_decoder(), 0, 1, mode="spmpd")


def _dynamo_graph(model, *args, **kwargs):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=backend, fullgraph=True)(*args, **kwargs)
    torch._dynamo.reset()
    return graphs[0]


@pytest.mark.parametrize("mode", ["spmd", "mpmd"])
def test_only_the_twin_bakes_a_rank_constant(mode):
    dense = moe_decoder()
    model = ShardedDecoderLM(dense, 1, 2, None, mode=mode).eval()
    ids, pos, k, v = prefill_inputs(dense)
    gm = _dynamo_graph(model, ids, pos, [model.shard_cache(c) for c in k], [model.shard_cache(c) for c in v], rank=rank_tensor(1))
    assert [p.name for p in rank_placeholders(gm)] == ["l_rank_"]
    found = find_rank_constants(gm)
    if mode == "spmd":
        assert found == []
    else:
        assert [f.node for f in found] == ["rank_id"]
        assert "neuron_fixtures/spmd.py" in found[0].source and "torch.tensor([[self.ep_rank]]" in found[0].source
        assert found[0].value == [[1]]
