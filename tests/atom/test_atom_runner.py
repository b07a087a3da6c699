"""Unit tests of the model runner at every compilation level: what is compiled, what is recorded.

The model is the level decoder of the conformance matrix (``conformance/models/atom_graph_model.py``:
``@token_graph @support_torch_compile``, attention a splitting op that is an eager region). At
level 3 the piece compiler is faked (``GraphPieces`` runs each piece as its FX graph) so that the
tests look at the recorder and the runner, not at a compiler; levels 0 and 1 need no compiler.
The conformance module runs the full matrix with Inductor and the reference's pieces.
"""

from __future__ import annotations

import io

import pytest
import torch

import reference.atom as atom
from conformance.models import atom_graph_model as G
from reference.atom import vllm_backend as atom_backends

ATOL = 1e-5
SIZES = (1, 2, 4)


class GraphPieces(atom.CompilerInterface):
    """A fake piece compiler: the 'compiled' piece is the graph itself; nothing is cached."""

    name = "graph_pieces"

    def compile(self, graph, example_inputs, compiler_config, runtime_shape=None, key=None):
        return graph, None


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def cache():
    return G.kv_cache(atom)


def _runner(level, mode, cache, tmp_path, monkeypatch, **cc):
    if level == 3:
        monkeypatch.setattr(atom_backends, "make_compiler", lambda config: GraphPieces())
    config = G.level_config(atom, level, mode, cache_dir=str(tmp_path), sizes=SIZES, **cc)
    model = G.build_level_decoder(atom, config)
    return model, atom.ModelRunner(model, config, kv_cache_data=cache, max_model_len=G.MAX_LEN, progress=io.StringIO())


def _steps(model, runner, cache):
    """A prefill of two requests, then decodes of 1..5 requests; the worst |diff| against eager."""
    worst = 0.0
    with torch.no_grad():
        ids, pos, lens, q = G.prefill_step([3, 2], seed=5)
        got = runner.execute(ids, pos, lens, is_prefill=True, query_lens=q)
        worst = max(worst, (got - G.eager_step_logits(atom, model, cache, ids, pos, lens, q)).abs().max().item())
        for bs in range(1, max(SIZES) + 2):
            ids, pos, lens = G.decode_step(bs, seed=100 + bs)
            got = runner.execute(ids, pos, lens)
            worst = max(worst, (got - G.eager_step_logits(atom, model, cache, ids, pos, lens)).abs().max().item())
    return worst


def _launches(model, runner):
    recs = runner.req_graph.recordings() + atom.token_graph_of(model.model).recordings()
    return {r.name: [(launch.name, launch.eager) for launch in r.launches] for r in recs}


@pytest.mark.parametrize("mode", ["TR_HYBRID", "FULL"])
@pytest.mark.spec("004.modes.tr-hybrid-token-graphs", "004.modes.split-op-not-break")
def test_level_3_pieces_are_recorded_inline_and_the_attention_breaks_token_graphs(cache, tmp_path, monkeypatch, mode):
    model, runner = _runner(3, mode, cache, tmp_path, monkeypatch)
    with torch.no_grad():
        assert runner.capture_cudagraph()[1] == list(SIZES)
    launches = _launches(model, runner)
    assert len(launches) == len(SIZES)
    live = mode == "TR_HYBRID"  # the splitting piece holds the eager region: live under TR_HYBRID only
    for name, seen in launches.items():
        assert seen == [("piece0", False), ("split:submod_1", live), ("piece1", False)], name
    assert _steps(model, runner, cache) <= ATOL
    assert runner.counters.replays == max(SIZES)


@pytest.mark.spec("004.levels.level-1-runner-compiles")
def test_level_1_is_compiled_by_the_runner_and_recorded(cache, tmp_path, monkeypatch):
    from torch._dynamo.utils import counters

    frames = counters["stats"]["unique_graphs"]
    model, runner = _runner(1, "TR_HYBRID", cache, tmp_path, monkeypatch)
    assert model.model.do_not_compile  # the decorator leaves level 1 to the runner
    with torch.no_grad():
        runner.capture_cudagraph()
    assert counters["stats"]["unique_graphs"] > frames, "the level-1 runner ran no Dynamo frame"
    # The one graph Dynamo made holds the eager region: it replays live.
    for seen in _launches(model, runner).values():
        assert len(seen) == 1 and seen[0][0].startswith("eager:graph") and seen[0][1], seen
    assert _steps(model, runner, cache) <= ATOL


def test_level_0_records_the_eager_forward_as_one_launch(cache, tmp_path, monkeypatch):
    from torch._dynamo.utils import counters

    frames = counters["stats"]["unique_graphs"]
    model, runner = _runner(0, "TR_HYBRID", cache, tmp_path, monkeypatch)
    with torch.no_grad():
        runner.capture_cudagraph()
    for seen in _launches(model, runner).values():
        assert len(seen) == 1 and seen[0][0].endswith("eager forward") and seen[0][1]
    assert _steps(model, runner, cache) <= ATOL
    assert counters["stats"]["unique_graphs"] == frames


@pytest.mark.parametrize("mode", ["FULL", "TR_HYBRID"])
@pytest.mark.spec("004.modes.use-cudagraph-false")
def test_use_cudagraph_false_captures_nothing_whatever_the_mode(cache, tmp_path, monkeypatch, mode):
    model, runner = _runner(0, mode, cache, tmp_path, monkeypatch, use_cudagraph=False)
    assert runner.capture_cudagraph() == (0.0, [])
    assert _launches(model, runner) == {}
    assert _steps(model, runner, cache) <= ATOL
    assert runner.counters.replays == 0
    assert runner.counters.eager_by_reason == {"prefill": 1, "nothing_captured": max(SIZES) + 1}


def test_invalid_combinations_are_typed_errors_naming_the_field(cache, tmp_path):
    plain = torch.nn.Linear(2, 2)
    config = G.level_config(atom, 2, "NONE", cache_dir=str(tmp_path))
    with pytest.raises(atom.ConfigError, match="no decorated module") as err:
        atom.ModelRunner(plain, config)
    assert err.value.field == "level"
    config = G.level_config(atom, 0, "FULL_AND_TR_HYBRID", cache_dir=str(tmp_path))
    with pytest.raises(atom.ConfigError, match="no @token_graph unit") as err:
        atom.ModelRunner(plain, config)
    assert err.value.field == "cudagraph_mode"
    # Without capture the same model and mode are fine.
    atom.ModelRunner(plain, G.level_config(atom, 0, "TR_HYBRID", cache_dir=str(tmp_path), use_cudagraph=False))
