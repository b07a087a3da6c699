"""The graph-capture contract with ``torch.cuda.CUDAGraph`` (marker ``cuda``; skipped without a GPU).

The same model, runner and checks as the CPU tests, on a CUDA device: the recorder there is
:class:`~reference.atom.recorder.CUDARecording` (one CUDA graph per segment, all in one pool).
Pieces come from Dynamo's ``eager`` backend and from Inductor. ``scripts/gpu_check.sh`` runs this
module; it needs only torch with CUDA, pytest and this repository.
"""

from __future__ import annotations

import io
import types

import pytest
import torch

from conformance.models import atom_graph_model as G
from reference.atom import config as atom_config
from reference.atom import forward_context as fwd
from reference.atom import model_runner, recorder, region_graph
from reference.atom.graph_mode import CUDAGraphMode

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="no CUDA device: the torch.cuda.CUDAGraph recorder needs a GPU (run scripts/gpu_check.sh on one)",
    ),
]

ATOM = types.SimpleNamespace(
    CompilationConfig=atom_config.CompilationConfig,
    Config=atom_config.Config,
    **{name: getattr(m, name) for m in (fwd, recorder, region_graph, model_runner) for name in m.__all__},
)
MODES = {"FULL": CUDAGraphMode.FULL, "TR_HYBRID": CUDAGraphMode.TR_HYBRID}
SIZES = (2, 4, 8)
ATOL = 1e-4  # float32 (TF32 off by default) through cuBLAS or Triton against the same ops eagerly
DEV = "cuda"


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    # gpu_check.sh runs without the suite's plugin, which would otherwise reset Dynamo per test.
    torch._dynamo.reset()


def _setup(backend, mode, **kw):
    model = G.compiled_decoder(ATOM, backend, device=DEV)
    cache = G.kv_cache(ATOM, device=DEV)
    runner = G.make_runner(ATOM, model, MODES[mode], sizes=SIZES, cache=cache, device=DEV, **kw)
    return model, cache, runner


def _recordings(model, runner):
    return runner.req_graph.recordings() + region_graph.token_graph_of(model.model).recordings()


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_cuda_replay_equals_eager_for_every_batch_size(backend, mode):
    model, cache, runner = _setup(backend, mode)
    with torch.no_grad():
        assert runner.capture_cudagraph()[1] == list(SIZES)
    recs = _recordings(model, runner)
    assert len(recs) == len(SIZES) and all(isinstance(r, recorder.CUDARecording) for r in recs)
    if mode == "TR_HYBRID":  # split at the eager region: graph, live attention, graph
        assert all([type(s).__name__ for s in r.segments] == ["CUDAGraph", "Launch", "CUDAGraph"] for r in recs)
    assert G.replay_mismatches(ATOM, model, runner, cache, range(1, max(SIZES) + 1), atol=ATOL, device=DEV) == {}
    assert runner.counters.replays == max(SIZES)


class _NoCopyRecording(recorder.CUDARecording):
    """A broken recorder: replays without copying the live inputs in."""

    def _copy_inputs(self, live_inputs):
        pass


def test_cuda_recorder_without_copy_in_fails_the_contract():
    # The recorder's own contract (the runner writes its steps into the recorded buffers itself):
    # replay(live) copies live into the static buffer; one that does not returns the capture's.
    def run(rec):
        static = torch.zeros(4, device=DEV)
        with torch.no_grad():
            rec.record(lambda x: recorder.launch(torch.mul, (x, 3.0), eager=False), static)
            return rec.replay(torch.full((4,), 2.0, device=DEV)).tolist()

    good = recorder.CUDARecording(pool=recorder.GraphPool(), break_at_eager_regions=False, name="good")
    stale = _NoCopyRecording(pool=recorder.GraphPool(), break_at_eager_regions=False, name="stale")
    assert run(good) == [6.0] * 4
    assert run(stale) == [0.0] * 4


def test_cuda_dispatch_follows_the_four_rules():
    model, cache, runner = _setup("eager", "TR_HYBRID")
    with torch.no_grad():
        runner.capture_cudagraph()
        for bs, kw in ((3, {}), (9, {}), (2, {"is_prefill": True})):
            ids, pos, lens = G.decode_step(bs, seed=bs, device=DEV)
            got = runner.execute(ids, pos, lens, **kw)
            torch.testing.assert_close(got, G.eager_logits(ATOM, model, cache, (ids, pos, lens)), atol=ATOL, rtol=0)
    assert runner.counters.replays == 1
    assert runner.counters.eager_by_reason == {"above_largest_size": 1, "prefill": 1}


def test_cuda_one_pool_is_smaller_than_a_pool_per_recording():
    model, cache, runner = _setup("eager", "FULL")
    shared = recorder.GraphPool()
    runner.req_graph = region_graph.ReqGraph(pool=shared)
    with torch.no_grad():
        runner.capture_cudagraph()
    separate = 0
    for bs in SIZES:  # the same buckets, each in a pool of its own
        alone = G.make_runner(ATOM, model, CUDAGraphMode.FULL, sizes=(bs,), cache=cache, device=DEV)
        alone.req_graph = region_graph.ReqGraph(pool=recorder.GraphPool())
        with torch.no_grad():
            alone.capture_cudagraph()
        separate += alone.req_graph.pool.nbytes
    assert 0 < shared.nbytes < separate


@pytest.mark.parametrize("mode", ["TR_HYBRID", "FULL"])
def test_cuda_level_3_capture_records_inductor_pieces_and_breaks_at_the_attention(mode, tmp_path):
    """The production default on a GPU: a ``@token_graph @support_torch_compile`` decoder at level 3
    (Inductor pieces), captured by the runner on ``torch.cuda.CUDAGraph``, replayed against eager."""
    import reference.atom as atom

    config = G.level_config(atom, 3, mode, cache_dir=str(tmp_path), sizes=(1, 2, 4))
    model = G.build_level_decoder(atom, config).to(DEV)
    cache = G.kv_cache(atom, device=DEV)
    runner = atom.ModelRunner(model, config, device=DEV, kv_cache_data=cache, max_model_len=G.MAX_LEN, progress=io.StringIO())
    with torch.no_grad():
        assert runner.capture_cudagraph()[1] == [1, 2, 4]
    recs = _recordings(model, runner)
    assert len(recs) == 3 and all(isinstance(r, recorder.CUDARecording) for r in recs)
    for rec in recs:
        kinds = [type(seg).__name__ for seg in rec.segments]
        # TR_HYBRID: graph, the live attention, graph; FULL: one graph holding everything.
        assert kinds == (["CUDAGraph", "Launch", "CUDAGraph"] if mode == "TR_HYBRID" else ["CUDAGraph"]), kinds
    with torch.no_grad():
        ids, pos, lens, q = G.prefill_step([3, 2], seed=5, device=DEV)
        got = runner.execute(ids, pos, lens, is_prefill=True, query_lens=q)
        torch.testing.assert_close(got, G.eager_step_logits(atom, model, cache, ids, pos, lens, q), atol=ATOL, rtol=0)
        for bs in range(1, 6):
            ids, pos, lens = G.decode_step(bs, seed=100 + bs, device=DEV)
            got = runner.execute(ids, pos, lens)
            torch.testing.assert_close(got, G.eager_step_logits(atom, model, cache, ids, pos, lens), atol=ATOL, rtol=0)
    assert runner.counters.replays == 4


PRODUCTION_MODES = ("FULL", "FULL_DECODE_ONLY", "TR_HYBRID", "FULL_AND_TR_HYBRID")


def test_cuda_production_decoder_matches_eager_under_every_graph_mode_in_one_process(tmp_path):
    """The production-shaped decoder (a live attention op and one recorded inline, each writing an
    output buffer the piece before allocated, reading the KV cache from the forward context) at
    level 3 with Inductor pieces: one model, a runner per mode, each capturing again in this process
    (the token graphs of the mode before are dropped, the pool stays), replayed against eager at
    every batch size up to one past the largest capture size, in a shuffled order."""
    import reference.atom as atom

    model = G.build_production_decoder(atom, G.production_config(atom, 3, "NONE", cache_dir=str(tmp_path))).to(DEV)
    cache = G.production_kv_cache(atom, device=DEV)
    order = [3, 1, 5, 4, 2]
    worst = {}
    for mode in PRODUCTION_MODES:
        config = G.production_config(atom, 3, mode, cache_dir=str(tmp_path))
        runner = atom.ModelRunner(model, config, device=DEV, kv_cache_data=cache, max_model_len=G.MAX_LEN, progress=io.StringIO())
        with torch.no_grad():
            assert runner.capture_cudagraph()[1] == [1, 2, 4]
            for bs in order:
                ids, pos, lens = G.decode_step(bs, seed=100 + bs, device=DEV)
                got = runner.execute(ids, pos, lens)
                worst[(mode, bs)] = (got - G.eager_step_logits(atom, model, cache, ids, pos, lens)).abs().max().item()
                step = runner.last_step
                assert step.replayed == (bs <= 4), (mode, bs, step)
        del runner
    assert {k: v for k, v in worst.items() if not v <= ATOL} == {}


def test_cuda_a_capture_after_every_earlier_graph_is_gone_still_finds_its_pool():
    # The pool outlives its recordings: drop every graph of a first runner, then capture again.
    import gc

    model, cache, runner = _setup("eager", "FULL")
    with torch.no_grad():
        runner.capture_cudagraph()
    del runner
    gc.collect()
    model, cache, runner = _setup("eager", "FULL")
    with torch.no_grad():
        assert runner.capture_cudagraph()[1] == list(SIZES)
    assert G.replay_mismatches(ATOM, model, runner, cache, range(1, max(SIZES) + 1), atol=ATOL, device=DEV) == {}
