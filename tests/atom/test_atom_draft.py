"""Unit tests of speculative decoding's graphs (an MTP-style drafter recording its passes as
DraftGraphs in the one pool, the target verifying ``mtp_k + 1`` rows per request), the static
forward context feeding ``no_compile_layers``, and the drain before every recording (a real gloo
process group of one rank on loopback; its async all-reduce is the pending collective).

The level decoder runs at level 0 (nothing to compile: the graphs and the dispatch are under test).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import reference.atom as atom
from conformance.models import atom_graph_model as G
from reference.atom import recorder

ATOL = 1e-5
SIZES = (1, 2, 4)
MTP_K = 2


class Drafter(nn.Module):
    """An MTP-style drafter: from a request's hidden state and last token, the next hidden state
    and the logits of the next token."""

    hidden_size = G.DIM

    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(9)
        self.embed = nn.Embedding(G.VOCAB, G.DIM)
        self.mix = nn.Linear(2 * G.DIM, G.DIM)
        self.head = nn.Linear(G.DIM, G.VOCAB)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)

    def forward(self, hidden, token_ids):
        h = torch.tanh(self.mix(torch.cat([hidden, self.embed(token_ids)], dim=-1)))
        return h, self.head(h)


def _eager_drafts(drafter, hidden, ids):
    out = []
    for _ in range(MTP_K):
        hidden, logits = drafter(hidden, ids)
        ids = logits.argmax(-1)
        out.append(ids)
    return torch.stack(out, dim=1)


@pytest.fixture(scope="module")
def setup():
    model = G.build_level_decoder(atom, G.level_config(atom, 0, "NONE"))
    cache = G.kv_cache(atom)
    pool = atom.GraphPool()
    config = G.level_config(atom, 0, "FULL", sizes=SIZES)
    runner = atom.ModelRunner(
        model, config, kv_cache_data=cache, max_model_len=G.MAX_LEN, mtp_k=MTP_K, drafter=Drafter(), progress=open("/dev/null", "w")
    )
    runner.req_graph, runner.draft_graph = atom.ReqGraph(pool=pool), atom.DraftGraph(pool=pool)
    with torch.no_grad():
        runner.capture_cudagraph()
    return model, cache, runner, pool


@pytest.mark.spec("004.capture.max-q-len")
def test_the_target_verifies_mtp_k_plus_one_rows_per_request_in_its_request_bucket(setup):
    model, cache, runner, _ = setup
    assert runner.req_graph.keys() == [(s, MTP_K) for s in SIZES]  # request_bucket: (running_bs, draft_num)
    q = MTP_K + 1
    for bs in (1, 3, 5):
        gen = torch.Generator().manual_seed(bs)
        lens = torch.randint(0, G.MAX_LEN - q + 1, (bs,), generator=gen)
        ids = torch.randint(0, G.VOCAB, (bs * q,), generator=gen)
        pos = torch.cat([torch.arange(int(c), int(c) + q) for c in lens])
        with torch.no_grad():
            got = runner.execute(ids, pos, lens)
        want = G.eager_step_logits(atom, model, cache, ids, pos, lens, torch.full((bs,), q))
        torch.testing.assert_close(got, want, atol=ATOL, rtol=0)


@pytest.mark.spec("004.tokengraph.drafter")
def test_the_drafter_replays_its_passes_from_draft_graphs_in_the_one_pool(setup):
    _, _, runner, pool = setup
    assert runner.draft_graph.keys() == [(s, j) for s in SIZES for j in range(MTP_K)]
    assert atom.DraftGraph().pool is atom.graph_pool()  # by default, the pool every graph shares
    sizes = [r.nbytes for r in runner.req_graph.recordings() + runner.draft_graph.recordings()]
    assert pool.nbytes == max(sizes) < sum(sizes)
    before = runner.counters.replays
    for bs in (1, 3, 6):
        gen = torch.Generator().manual_seed(40 + bs)
        hidden, ids = torch.randn(bs, G.DIM, generator=gen), torch.randint(0, G.VOCAB, (bs,), generator=gen)
        with torch.no_grad():
            got = runner.propose(hidden, ids)
            want = _eager_drafts(runner.drafter, hidden, ids)
        assert torch.equal(got, want), bs
    assert runner.counters.replays - before == 2  # bs 6 is above the ladder: eager
    with pytest.raises(atom.GraphCaptureError, match=r"no graph for draft bucket \(3, 0\) \(running_bs, pass\)"):
        runner.draft_graph.replay((3, 0), torch.zeros(3, G.DIM), torch.zeros(3, dtype=torch.long))


def test_a_drafter_needs_mtp_k_and_its_width(setup):
    model, cache, _, _ = setup
    with pytest.raises(atom.ConfigError, match="mtp_k >= 1") as err:
        atom.ModelRunner(model, G.level_config(atom, 0, "FULL"), drafter=Drafter())
    assert err.value.field == "drafter"


@pytest.mark.spec("004.context.no-compile-layers")
def test_static_forward_context_feeds_no_compile_layers_of_every_step():
    seen = []

    class Layer(nn.Module):
        def __init__(self, config, index):
            super().__init__()
            config.compilation_config.static_forward_context[index] = self  # registered as it is built

    config = G.level_config(atom, 0, "NONE")
    layers = [Layer(config, i) for i in range(2)]
    for _ in range(2):
        with atom.in_forward_context(None, config, atom.Context()) as fc:
            seen.append(dict(fc.no_compile_layers))
            fc.no_compile_layers.clear()  # a step's dict is its own: the config keeps its layers
    assert seen == [{0: layers[0], 1: layers[1]}] * 2
    assert config.compilation_config.compute_hash() == G.level_config(atom, 0, "NONE").compilation_config.compute_hash()
    with pytest.raises(atom.ConfigError) as err:
        atom.CompilationConfig(static_forward_context=[1])
    assert err.value.field == "static_forward_context"


@pytest.mark.spec("004.tokengraph.drain-collectives")
def test_every_recording_first_drains_pending_collectives():
    import torch.distributed as dist

    store = dist.HashStore()
    group = dist.ProcessGroupGloo(store, 0, 1)  # one real gloo rank on loopback, no global state
    work = recorder.track_collective(group.allreduce([torch.ones(4)]))
    rec = recorder.CPURecording(pool=recorder.GraphPool(), break_at_eager_regions=True, name="drained")
    rec.record(lambda x: x * 2, torch.zeros(2))
    assert rec.drained == 1 and work.is_completed()
    assert recorder.drain_collectives() == 0  # nothing left pending; with nothing pending the drain is a no-op
    again = recorder.CPURecording(pool=recorder.GraphPool(), break_at_eager_regions=True, name="nothing")
    again.record(lambda x: x * 2, torch.zeros(2))
    assert again.drained == 0
