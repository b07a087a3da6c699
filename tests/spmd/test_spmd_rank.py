"""The runtime-rank helpers compute the per-rank values the baked code would, for every rank."""

from __future__ import annotations

import pytest
import torch

from reference.spmd import ep_rank_id, get_neuron_ep_rank, get_neuron_tp_rank, rank_tensor, select_shard, shard_indices


@pytest.mark.parametrize("ep, tp", [(2, 1), (2, 2), (4, 2), (1, 4)])
@pytest.mark.spec("002.rank.ep-rank-idiom")
def test_ep_and_tp_rank_match_the_python_layout(ep, tp):
    for r in range(2 * ep * tp):  # two data-parallel replicas of the EP x TP block
        rank = rank_tensor(r)
        assert int(get_neuron_tp_rank(rank, tp)) == r % tp
        assert int(get_neuron_ep_rank(rank, ep, tp)) == (r % (ep * tp)) // tp
        rid = ep_rank_id(rank, ep, tp)
        assert rid.shape == (1, 1) and rid.dtype == torch.int32 and int(rid) == (r % (ep * tp)) // tp


@pytest.mark.spec("002.rank.runtime-tensor")
def test_rank_tensor_is_a_0d_int64_tensor():
    t = rank_tensor(3)
    assert t.shape == () and t.dtype == torch.int64 and int(t) == 3
    assert int(rank_tensor()) == 0  # no process group: rank 0


@pytest.mark.parametrize("r", range(4))
@pytest.mark.spec("002.rank.index-select", "002.rank.index-select-value-identical")
def test_index_select_shard_equals_the_static_slice(r):
    x = torch.arange(2 * 12, dtype=torch.float32).view(2, 12)
    shard = 3
    assert torch.equal(shard_indices(rank_tensor(r), shard), torch.arange(r * shard, (r + 1) * shard))
    assert torch.equal(select_shard(x, 1, rank_tensor(r), shard), x[:, r * shard:(r + 1) * shard])


@pytest.mark.spec("002.spmd.additive-fallback", "002.rank.runtime-tensor")
def test_runner_threads_the_rank_tensor_into_forward():
    """The runner passes this process's rank (0 here) as a tensor to a model whose forward takes
    ``rank``; the layer was built for rank 1, so the baked path (rank=None) would differ."""
    from neuron_fixtures.spmd import EmbedMoE
    from reference.runner.model_loading import NeuronModelRunner

    torch._dynamo.reset()
    model = EmbedMoE(1, 2, None).eval()
    ids = torch.randint(0, 128, (2, 3), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        out = NeuronModelRunner(model).load_model().run_site(None, ids=ids)
        threaded = model(ids, rank=rank_tensor(0))
        baked = model(ids)
    torch._dynamo.reset()
    torch.testing.assert_close(out, threaded)
    assert not torch.allclose(threaded, baked)
