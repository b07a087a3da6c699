"""Unit tests of ATOM graph capture: forward context, recorders, token and request graphs, runner.

The compiled pieces here come from Dynamo's ``eager`` backend (a real Dynamo graph run as FX, no
code generation) behind the recording backend, to keep the module fast; the conformance module
runs the same contract with the reference's backend and with Inductor.
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import types

import pytest
import torch

from conformance.models import atom_graph_model as G
from reference.atom import config as atom_config
from reference.atom import forward_context as fwd
from reference.atom import model_runner, recorder, region_graph
from reference.atom.graph_mode import CUDAGraphMode

ATOM = types.SimpleNamespace(
    CompilationConfig=atom_config.CompilationConfig,
    Config=atom_config.Config,
    **{name: getattr(m, name) for m in (fwd, recorder, region_graph, model_runner) for name in m.__all__},
)
TR, FULL = CUDAGraphMode.TR_HYBRID, CUDAGraphMode.FULL
ATOL = 1e-5  # the eager backend runs the same ops as the reference, in the same order


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Every test compiles a new model with the same forward code: without a reset, Dynamo's
    recompile limit for that code is reached within the module and later forwards run eagerly."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def cache():
    return G.kv_cache(ATOM)


def _model(per_phase: bool = False):
    return G.compiled_decoder(ATOM, "eager", per_phase=per_phase)


# --- forward context ---------------------------------------------------------------------------


@pytest.mark.spec("004.context.fields", "004.context.context-dataclass")
def test_forward_context_has_every_field_of_the_seed_table():
    fields = {f.name for f in dataclasses.fields(fwd.ForwardContext)}
    assert {"no_compile_layers", "attn_metadata", "kv_cache_data", "context", "dp_metadata", "spec_decode_metadata"} <= fields
    assert [f.name for f in dataclasses.fields(fwd.Context)] == [
        "positions", "is_prefill", "batch_size", "running_bs", "running_tokens", "is_draft",
    ]


@pytest.mark.spec("004.context.lifecycle")
def test_set_use_reset_lifecycle_is_visible_from_any_layer():
    seen = []

    def layer():
        fc = fwd.get_forward_context()
        seen.append((fc.context.batch_size, fc.attn_metadata.max_seqlen_q, fc.dp_metadata.max_tokens_across_dp))

    attn = fwd.AttentionMetaData(max_seqlen_q=2)
    fwd.set_forward_context(attn, None, fwd.Context(batch_size=3), num_tokens_across_dp=[6, 4])
    try:
        layer()
    finally:
        fwd.reset_forward_context()
    assert seen == [(3, 2, 6)]
    assert fwd.get_forward_context() == fwd.ForwardContext()


def test_a_leaked_context_is_an_error_at_the_next_set_naming_where_it_was_set():
    leak_line = inspect.currentframe().f_lineno + 1
    fwd.set_forward_context(None, None, fwd.Context())  # never reset: the leak
    try:
        with pytest.raises(fwd.ForwardContextError) as err:
            fwd.set_forward_context(None, None, fwd.Context())
        assert f"{__file__}:{leak_line}" in str(err.value)
        assert "reset_forward_context" in str(err.value)
    finally:
        fwd.reset_forward_context()


@pytest.mark.spec("004.context.lifecycle")
def test_the_block_form_resets_on_error_and_bad_fields_are_rejected():
    with pytest.raises(ZeroDivisionError):
        with fwd.in_forward_context(None, None, fwd.Context(batch_size=1)):
            1 / 0
    assert fwd.get_forward_context().context is None
    with pytest.raises(fwd.ForwardContextError, match="tr_graph='replays'"):
        fwd.set_forward_context(None, None, None, tr_graph="replays")
    with pytest.raises(fwd.ForwardContextError, match="not both"):
        fwd.set_forward_context(None, None, None, num_tokens_across_dp=[1], dp_metadata=fwd.DPMetadata([1]))


# --- recorder ----------------------------------------------------------------------------------


def _compiled_affine():
    return torch.compile(lambda x: x * 2 + 1, backend=recorder.recording_backend("eager"), dynamic=False)


def test_replay_copies_live_inputs_into_the_recorded_buffer_and_returns_the_recorded_outputs():
    fn = _compiled_affine()
    static = torch.zeros(4)
    fn(static)  # warm-up compiles
    rec = recorder.CPURecording(pool=recorder.GraphPool(), break_at_eager_regions=True)
    rec.record(fn, static)
    live = torch.arange(4.0)
    first = rec.replay(live)
    assert torch.equal(first, live * 2 + 1)
    assert torch.equal(static, live)  # the graph read the live values at its recorded address
    second = rec.replay(torch.full((4,), 5.0))
    assert second is first and torch.equal(first, torch.full((4,), 11.0))


def test_live_inputs_must_fit_the_recorded_buffers_and_recordings_do_not_nest():
    fn = _compiled_affine()
    static = torch.zeros(4)
    fn(static)
    rec = recorder.CPURecording(pool=recorder.GraphPool(), break_at_eager_regions=True, name="g")
    rec.record(fn, static)
    with pytest.raises(recorder.GraphCaptureError, match=r"live input 0 is \(3,\).*recorded as \(4,\).*pad the step"):
        rec.replay(torch.zeros(3))
    with pytest.raises(recorder.GraphCaptureError, match="already recorded"):
        rec.record(fn, static)
    outer = recorder.CPURecording(pool=recorder.GraphPool(), break_at_eager_regions=True, name="outer")
    inner = recorder.CPURecording(pool=recorder.GraphPool(), break_at_eager_regions=True, name="inner")
    with pytest.raises(recorder.GraphCaptureError, match="cannot record while outer is recording"):
        outer.record(lambda x: inner.record(fn, x), static)


def test_work_between_compiled_pieces_is_refused_and_an_eager_forward_is_one_launch():
    # Once a compiled piece ran, tensor work outside any launch is invisible to the CPU recorder.
    piece = _compiled_affine()
    rec = recorder.CPURecording(pool=recorder.GraphPool(), break_at_eager_regions=True, name="plain")
    with pytest.raises(recorder.GraphCaptureError, match="not produced by a recorded launch"):
        rec.record(lambda x: piece(x) + 1, torch.zeros(2))
    # Nothing compiled (level 0): the forward itself is the launch, and replays on live inputs.
    whole = recorder.CPURecording(pool=recorder.GraphPool(), break_at_eager_regions=True, name="eager")
    whole.record(lambda x: x * 3 + 1, torch.zeros(2))
    assert [launch.name for launch in whole.launches] == ["eager:eager forward"]
    assert whole.replay(torch.tensor([1.0, 2.0])).tolist() == [4.0, 7.0]


@pytest.mark.spec("004.modes.eager-regions-live")
def test_an_eager_region_inside_a_launch_makes_it_replay_live_under_tr_hybrid():
    seen = []

    @region_graph.eager_region
    def region(x):
        seen.append(fwd.get_forward_context().context.batch_size)
        return x + fwd.get_forward_context().context.batch_size

    def outer(x):  # a splitting piece, or a level-2 graph that calls the region inside
        return recorder.launch(lambda t: region(t * 2), (x,), eager=False, name="outer")

    def run(rec, bs, x):
        with fwd.in_forward_context(None, None, fwd.Context(batch_size=bs)):
            return rec.replay(x) if rec.launches else rec.record(outer, x)

    for breaks, want in ((True, 12.0), (False, 11.0)):
        rec = recorder.CPURecording(pool=recorder.GraphPool(), break_at_eager_regions=breaks, name="nested")
        run(rec, 1, torch.zeros(1))
        assert [(launch.name, launch.eager) for launch in rec.launches] == [("outer", breaks)]
        assert run(rec, 2, torch.full((1,), 5.0)).item() == want  # live: 5*2+2; inline: the capture's 1


class _NoCopyRecording(recorder.CPURecording):
    """A recorder that replays without copying live inputs in (its callers must stage them)."""

    def _copy_inputs(self, live_inputs):
        pass


@pytest.mark.parametrize("mode", [FULL, TR], ids=["FULL", "TR_HYBRID"])
def test_the_runner_writes_each_replayed_step_padding_included_into_the_buffers_the_recording_reads(cache, monkeypatch, mode):
    # The runner owns the step's buffers: it writes the step there itself, so a replay is right even
    # with a recorder that copies nothing in, and padding rows and requests hold padding values.
    monkeypatch.setattr(region_graph, "new_recording", lambda device, **kw: _NoCopyRecording(**kw))
    model = _model()
    runner = G.make_runner(ATOM, model, mode, sizes=(2, 4), cache=cache)
    runner.capture_cudagraph()
    fv = runner.forward_vars
    fv["input_ids"].fill_(7), fv["positions"].fill_(7), fv["context_lens"].fill_(7)  # stale values
    assert G.replay_mismatches(ATOM, model, runner, cache, [3], atol=ATOL) == {}
    ids, pos, lens = G.decode_step(3, seed=103)
    assert fv["input_ids"][:4].tolist() == ids.tolist() + [0]
    assert fv["positions"][:4].tolist() == pos.tolist() + [0]
    assert fv["context_lens"][:4].tolist() == lens.tolist() + [0]
    assert runner.last_step == model_runner.StepReport(
        path="token_graph" if mode is TR else "req_graph", batch_size=3, rows=3, is_prefill=False, bucket=4, padded_rows=1
    )


# --- region graphs -----------------------------------------------------------------------------


@pytest.mark.spec("004.keying.request-bucket")
def test_request_bucket_is_running_bs_and_draft_num():
    assert region_graph.request_bucket(4, 1) == (4, 0)
    assert region_graph.request_bucket(4, 3) == (4, 2)
    with pytest.raises(recorder.GraphCaptureError, match="max_seqlen_q=0"):
        region_graph.request_bucket(4, 0)


@pytest.mark.spec("004.pool.one-pool")
def test_every_graph_records_into_the_one_pool_by_default():
    assert region_graph.ReqGraph().pool is region_graph.graph_pool()
    assert region_graph.TokenGraph().pool is region_graph.graph_pool()
    assert region_graph.graph_pool() is region_graph.graph_pool()


def test_the_pool_is_the_largest_recording_not_the_sum(cache):
    model = _model()
    pool = recorder.GraphPool()
    graphs = region_graph.ReqGraph(pool=pool)
    runner = G.make_runner(ATOM, model, FULL, sizes=(2, 4, 8), cache=cache)
    runner.req_graph = graphs
    runner.capture_cudagraph()
    sizes = [r.nbytes for r in graphs.recordings()]
    assert len(sizes) == 3 and min(sizes) > 0
    assert pool.nbytes == max(sizes) < sum(sizes)
    # Buckets share the memory: a small bucket's outputs lie inside the largest bucket's span.
    base = pool.storage(0).data_ptr()
    small = graphs.replay((2, 0), *[runner.forward_vars[k][:2] for k in ("input_ids", "positions", "context_lens")])
    assert base <= small.data_ptr() < base + pool.nbytes
    # Interleaved replays of different buckets stay correct (each output consumed before the next).
    assert G.replay_mismatches(ATOM, model, runner, cache, [8, 2, 7, 1, 4], atol=ATOL) == {}


def test_the_pool_outlives_its_recordings_a_second_runner_and_a_second_model_capture_and_replay(cache):
    # The CPU twin of the CUDA pool's lifetime rule: the pool, not its recordings, owns its memory,
    # so dropping every graph of one runner leaves it usable; a second capture on the same model
    # records its own token graphs (the first runner's read the first runner's buffers).
    import gc

    pool = region_graph.graph_pool()
    first_model = _model()
    first = G.make_runner(ATOM, first_model, TR, sizes=(2, 4), cache=cache)
    first.capture_cudagraph()
    storage = pool.storage(0)
    old = region_graph.token_graph_of(first_model.model).recordings()
    del first
    gc.collect()
    again = G.make_runner(ATOM, first_model, TR, sizes=(2, 4), cache=cache)
    again.capture_cudagraph()
    assert not set(map(id, old)) & set(map(id, region_graph.token_graph_of(first_model.model).recordings()))
    torch._dynamo.reset()
    other_model = _model()
    other = G.make_runner(ATOM, other_model, FULL, sizes=(2, 4), cache=cache)
    other.capture_cudagraph()
    assert pool.storage(0) is storage
    for bs in (1, 3, 4, 2):  # the two models interleaved, each output consumed before the next replay
        assert G.replay_mismatches(ATOM, first_model, again, cache, [bs], atol=ATOL) == {}
        assert G.replay_mismatches(ATOM, other_model, other, cache, [bs], atol=ATOL) == {}


@pytest.mark.parametrize("per_phase", [False, True])
@pytest.mark.spec("004.tokengraph.per-phase")
def test_token_graph_buckets_per_phase(cache, per_phase):
    model = _model(per_phase=per_phase)
    unit = model.model

    for rows in (4, 2):
        G.record_token_pass(ATOM, unit, cache, rows, is_prefill=False)
    G.record_token_pass(ATOM, unit, cache, 4, is_prefill=True)
    graph = region_graph.token_graph_of(unit)
    assert graph.captured_sizes("decode") == [2, 4]
    assert graph.captured_sizes("prefill") == [4]
    assert len(graph.recordings()) == (3 if per_phase else 2)  # shared buckets are not recorded twice
    with pytest.raises(recorder.GraphCaptureError, match=r"no token graph recorded for 2 rows in a prefill step; prefill buckets: \[4\]"):
        graph.replay((torch.zeros(2, dtype=torch.long), torch.zeros(2, dtype=torch.long)), phase="prefill")


@pytest.mark.spec("004.modes.eager-regions-live")
def test_eager_regions_run_live_under_tr_hybrid_and_inline_under_full(cache):
    model = _model()
    tr = G.make_runner(ATOM, model, TR, sizes=(2, 4), cache=cache)
    full = G.make_runner(ATOM, model, FULL, sizes=(2, 4), cache=cache)
    tr.capture_cudagraph()
    full.capture_cudagraph()
    ids, pos, lens = G.decode_step(2, seed=7)
    lens = lens.clamp(max=5)
    want = G.eager_logits(ATOM, model, cache, (ids, pos, lens))
    for runner, seen in ((tr, (2, 5)), (full, (2, G.MAX_LEN))):
        with torch.no_grad():
            got = runner.execute(ids, pos, lens, max_seqlen_k=5)
        assert runner.counters.replays == 1
        assert model.attention_calls[-1] == seen  # TR_HYBRID: the live metadata; FULL: the capture's
        torch.testing.assert_close(got, want, atol=ATOL, rtol=0)


# --- runner ------------------------------------------------------------------------------------


@pytest.mark.spec("004.replay.dispatch-rules")
def test_dispatch_follows_the_four_rules(cache):
    model = _model()
    runner = G.make_runner(ATOM, model, TR, sizes=(2, 4), cache=cache)
    runner.capture_cudagraph()
    eager = G.make_runner(ATOM, model, TR, sizes=(2, 4), cache=cache, enforce_eager=True)
    assert eager.capture_cudagraph() == (0.0, [])

    def step(r, bs, **kw):
        ids, pos, lens = G.decode_step(bs, seed=bs)
        with torch.no_grad():
            got = r.execute(ids, pos, lens, **kw)
        torch.testing.assert_close(got, G.eager_logits(ATOM, model, cache, (ids, pos, lens)), atol=ATOL, rtol=0)

    step(runner, 3)  # decode within the ladder: replays the bucket of 4
    assert (runner.counters.replays, runner.counters.eager) == (1, 0)
    step(runner, 6)  # decode above the largest size
    step(runner, 2, is_prefill=True)  # prefill
    step(eager, 2)  # enforce_eager
    assert runner.counters.replays == 1
    assert runner.counters.eager_by_reason == {"above_largest_size": 1, "prefill": 1}
    assert (eager.counters.replays, eager.counters.eager_by_reason) == (0, {"enforce_eager": 1})


@pytest.mark.spec("004.capture.largest-first", "004.capture.progress-rank-0", "004.capture.ascending-return")
def test_capture_goes_largest_first_reports_ascending_and_shows_progress_on_rank_0_only(cache):
    model = _model()
    out0, out1 = io.StringIO(), io.StringIO()
    r0 = G.make_runner(ATOM, model, FULL, sizes=(4, 2), cache=cache, progress=out0)
    r1 = G.make_runner(ATOM, model, FULL, sizes=(4, 2), cache=cache, progress=out1, rank=1)
    elapsed, sizes = r0.capture_cudagraph()
    assert sizes == [2, 4] and elapsed > 0
    assert out0.getvalue().splitlines() == [
        "capturing graphs 1/2: batch size 4 (4 rows)",
        "capturing graphs 2/2: batch size 2 (2 rows)",
    ]
    assert r1.capture_cudagraph()[1] == [2, 4] and out1.getvalue() == ""
    assert r0.req_graph.keys() == [(2, 0), (4, 0)]


@pytest.mark.spec("004.capture.sizes-explicit-or-ladder")
def test_capture_sizes_explicit_ladder_or_list_and_a_size_above_max_num_seqs_is_refused(cache):
    cc = atom_config.CompilationConfig
    assert model_runner.resolve_capture_sizes(cc(cudagraph_capture_sizes=[3, 1])) == ([3, 1], "cudagraph_capture_sizes")
    assert model_runner.resolve_capture_sizes(cc(cuda_graph_sizes=[32])) == ([1, 2, 3, 4, 5, 6, 7, 8, 16, 32], "cuda_graph_sizes")
    assert model_runner.resolve_capture_sizes(cc(cuda_graph_sizes=[1, 3, 5])) == ([1, 3, 5], "cuda_graph_sizes")
    runner = G.make_runner(ATOM, torch.nn.Identity(), FULL, sizes=(2, 16), max_num_seqs=8, cache=cache)
    with pytest.raises(atom_config.ConfigError, match="largest capture size 16 is above max_num_seqs=8") as err:
        runner.capture_cudagraph()
    assert err.value.field == "cudagraph_capture_sizes"


@pytest.mark.spec("004.modes.full-and-tr-hybrid")
def test_full_and_tr_hybrid_is_recorded_as_tr_hybrid(cache):
    model = _model()
    runner = G.make_runner(ATOM, model, CUDAGraphMode.FULL_AND_TR_HYBRID, sizes=(2, 4), cache=cache)
    runner.capture_cudagraph()
    assert runner.req_graph.keys() == []
    assert region_graph.token_graph_of(model.model).captured_sizes("decode") == [2, 4]
    assert G.replay_mismatches(ATOM, model, runner, cache, [1, 3], atol=ATOL) == {}
    assert runner.counters.replays == 2
