"""Contract: ATOM graph capture (token and request graphs, eager regions, one pool, dispatch).

Through the adapter's ``atom()`` capability (``conformance.harness.capabilities.AtomCapability``). A tiny decoder
(``conformance/models/atom_graph_model.py``) whose attention is an eager region reading the forward
context is compiled by the implementation's compile backend and by Inductor, captured under FULL
and TR_HYBRID, and every decode batch size from 1 to the largest captured size is replayed
against the uncompiled forward. Capture and the steps that need the compiler run once per
backend in a module fixture (before the suite resets Dynamo for each test); the tests read what
it saw. Recorder properties that do not depend on the compiler (pool, phases) use Dynamo's
``eager`` backend to stay fast.
"""

from __future__ import annotations

import pytest
import torch

from conformance.models import atom_graph_model as G

SIZES = (2, 4)
# float32 pieces from another compiler against eager: sums of at most 64 terms reassociated.
ATOL = 1e-4


# The graph-capture names this contract uses, beyond the configuration's.
GRAPH_NAMES = (
    "AttentionMetaData", "Context", "KVCacheTensor", "in_forward_context", "get_forward_context",
    "eager_region", "token_graph", "token_graph_of", "TokenGraph", "ReqGraph", "request_bucket",
    "GraphPool", "graph_pool", "GraphCaptureError", "recording_backend", "ModelRunner",
)

# The module fixture below is expensive: --dist=loadgroup keeps the module on one xdist worker.
pytestmark = pytest.mark.xdist_group("atom_graphs")


@pytest.fixture(scope="module")
def atom(impl):
    module = impl.atom()
    missing = module.missing(*GRAPH_NAMES)
    if missing:
        # pytest.skip, not NotSupported: a module fixture's skip is cached and repeated for every test.
        pytest.skip(f"not supported by {impl.name}: ATOM graph capture (the ATOM capability has no {', '.join(missing)})")
    return module


def _eager_step(atom, model, cache, runner, bs, **kw):
    ids, pos, lens = G.decode_step(bs, seed=200 + bs)
    with torch.no_grad():
        got = runner.execute(ids, pos, lens, **kw)
    want = G.eager_logits(atom, model, cache, (ids, pos, lens))
    return (got - want).abs().max().item()


# Inductor's captures (a comparison, not the implementation's own path) run in make slow: they
# cost make test about 16 s of its 10-minute budget.
@pytest.fixture(scope="module", params=["compile_backend", pytest.param("inductor", marks=pytest.mark.slow)])
def captured(request, impl, atom):
    """Capture both modes with one backend and run every step the tests look at."""
    backend = impl.backend().names()["compile"] if request.param == "compile_backend" else "inductor"
    torch._dynamo.reset()
    model = G.compiled_decoder(atom, backend)
    cache = G.kv_cache(atom)
    modes = {"FULL": atom.CUDAGraphMode.FULL, "TR_HYBRID": atom.CUDAGraphMode.TR_HYBRID}
    out = {"backend": backend, "modes": {}}
    for name, mode in modes.items():
        runner = G.make_runner(atom, model, mode, sizes=SIZES, cache=cache)
        if name == "FULL":
            runner.req_graph = atom.ReqGraph(pool=atom.GraphPool())  # a private pool, to measure it
        _, sizes = runner.capture_cudagraph()
        mismatches = G.replay_mismatches(atom, model, runner, cache, range(1, max(SIZES) + 1), atol=ATOL)
        replays = runner.counters.replays
        ids, pos, lens = G.decode_step(max(SIZES), seed=300)
        with torch.no_grad():
            runner.execute(ids, pos, lens)
        out["modes"][name] = {
            "runner": runner,
            "sizes": sizes,
            "mismatches": mismatches,
            "replays": replays,
            "static_holds_live": torch.equal(runner.forward_vars["input_ids"][: max(SIZES)], ids),
        }
    # Dispatch on the TR_HYBRID runner, and an enforce_eager runner beside it.
    tr = out["modes"]["TR_HYBRID"]["runner"]
    before = (tr.counters.replays, dict(tr.counters.eager_by_reason))
    diffs = {
        "decode_in_ladder": _eager_step(atom, model, cache, tr, 3),
        "decode_above_largest": _eager_step(atom, model, cache, tr, max(SIZES) + 1),
        "prefill": _eager_step(atom, model, cache, tr, 4, is_prefill=True),
    }
    eager = G.make_runner(atom, model, atom.CUDAGraphMode.TR_HYBRID, sizes=SIZES, cache=cache, enforce_eager=True)
    out["enforce_eager_capture"] = eager.capture_cudagraph()
    diffs["enforce_eager"] = _eager_step(atom, model, cache, eager, 2)
    out["dispatch"] = {
        "before": before,
        "after": (tr.counters.replays, dict(tr.counters.eager_by_reason)),
        "eager_runner": (eager.counters.replays, dict(eager.counters.eager_by_reason)),
        "diffs": diffs,
    }
    return out


@pytest.mark.parametrize("mode", ["FULL", "TR_HYBRID"])
@pytest.mark.spec("004.modes.full-whole-model", "004.replay.equals-eager")
def test_replay_equals_eager_for_every_batch_size_up_to_the_largest(captured, mode):
    seen = captured["modes"][mode]
    assert seen["sizes"] == list(SIZES)
    assert seen["mismatches"] == {}, f"{captured['backend']} {mode}: batch size -> worst |diff| over {ATOL}"
    assert seen["replays"] == max(SIZES)


@pytest.mark.parametrize("mode", ["FULL", "TR_HYBRID"])
@pytest.mark.spec("004.replay.equals-eager")
def test_replay_reads_live_inputs_through_the_recorded_buffers(captured, mode):
    # The step's inputs were fresh tensors; the recorded static buffers hold them after the replay,
    # so a graph that read its recorded addresses without a copy-in would have seen stale values.
    assert captured["modes"][mode]["static_holds_live"]


@pytest.mark.spec("004.replay.dispatch-rules", "004.replay.enforce-eager")
def test_dispatch_follows_the_four_rules(captured):
    d = captured["dispatch"]
    replays0, eager0 = d["before"]
    replays1, eager1 = d["after"]
    assert eager0 == {}
    assert replays1 - replays0 == 1  # decode within the ladder replays
    assert eager1 == {"above_largest_size": 1, "prefill": 1}
    assert captured["enforce_eager_capture"] == (0.0, [])
    assert d["eager_runner"] == (0, {"enforce_eager": 1})
    assert {k: v for k, v in d["diffs"].items() if not v <= ATOL} == {}


@pytest.mark.spec("004.pool.largest-not-sum")
def test_the_pool_is_the_largest_recording_not_the_sum(captured):
    graphs = captured["modes"]["FULL"]["runner"].req_graph
    sizes = [r.nbytes for r in graphs.recordings()]
    assert len(sizes) == len(SIZES) and min(sizes) > 0
    assert graphs.pool.nbytes == max(sizes) < sum(sizes)


@pytest.mark.spec("004.pool.one-pool")
def test_every_graph_shares_one_pool(atom):
    assert atom.ReqGraph().pool is atom.graph_pool() is atom.TokenGraph().pool


@pytest.mark.spec("004.replay.unknown-bucket")
def test_unknown_buckets_are_clear_errors(captured, atom):
    runner = captured["modes"]["FULL"]["runner"]
    with pytest.raises(atom.GraphCaptureError, match=r"no graph for request bucket \(3, 0\)"):
        runner.req_graph.replay(atom.request_bucket(3, 1))


@pytest.mark.parametrize("per_phase", [False, True])
@pytest.mark.spec("004.tokengraph.per-phase", "004.tokengraph.not-recorded-again")
def test_token_graph_buckets_are_per_phase(atom, per_phase):
    model = G.compiled_decoder(atom, "eager", per_phase=per_phase)
    cache = G.kv_cache(atom)
    unit = model.model

    G.record_token_pass(atom, unit, cache, 2, is_prefill=False)
    graph = atom.token_graph_of(unit)
    assert graph.captured_sizes("decode") == [2]
    assert graph.captured_sizes("prefill") == []  # a decode-only recording offers no prefill bucket
    G.record_token_pass(atom, unit, cache, 2, is_prefill=True)
    assert graph.captured_sizes("prefill") == [2]
    assert len(graph.recordings()) == (2 if per_phase else 1)
