"""Unit tests of ForwardMode (per-step decision, DP padding to one token bucket) and TBO decode
(the split rule, the microbatch ranges, metadata laid out for the split, the eager path for a split
no recording serves), through the model runner on the level decoder at level 0 (no compiler needed:
what is under test is the dispatch, not the pieces)."""

from __future__ import annotations

import io

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import reference.atom as atom
from conformance.models import atom_graph_model as G
from reference.atom.forward_context import ForwardContextError
from reference.atom.forward_mode import ForwardMode, decode_bucket_splits, decode_ubatch_request_ranges
from reference.atom.graph_mode import CUDAGraphMode

TR, FULL, NONE = CUDAGraphMode.TR_HYBRID, CUDAGraphMode.FULL, CUDAGraphMode.NONE
ATOL = 1e-5
SIZES = (1, 2, 4)


@given(st.integers(min_value=1, max_value=512))
@pytest.mark.spec("004.keying.tbo-split")
def test_a_bucket_splits_above_two_into_two_ranges_that_cover_it(running_bs):
    assert decode_bucket_splits(running_bs) == (running_bs > 2)
    if running_bs <= 2:
        with pytest.raises(ValueError, match="does not split"):
            decode_ubatch_request_ranges(running_bs)
        return
    first, second = decode_ubatch_request_ranges(running_bs)
    assert list(first) + list(second) == list(range(running_bs))
    assert 0 <= len(first) - len(second) <= 1 and len(second) >= 1


@given(st.lists(st.integers(min_value=0, max_value=600), min_size=1, max_size=8), st.sets(st.integers(min_value=1, max_value=512), min_size=1))
def test_every_dp_rank_pads_to_the_smallest_bucket_holding_the_groups_largest_count(counts, buckets):
    bucket = ForwardMode._pad_to_token_graph(counts, sorted(buckets))
    fitting = [b for b in buckets if b >= max(counts)]
    assert bucket == (min(fitting) if fitting else None)


def _decide(mode, bs, **kw):
    kw.setdefault("capture_sizes", SIZES)
    kw.setdefault("token_buckets", {"decode": list(SIZES), "prefill": []})
    return ForwardMode.decide(mode, is_prefill=kw.pop("is_prefill", False), batch_size=bs, num_tokens=kw.pop("num_tokens", bs), **kw)


def test_decide_follows_the_mode_the_ladder_and_the_group():
    assert (_decide(TR, 3).kind, _decide(TR, 3).running_tokens) == ("token_graph", 4)
    assert (_decide(FULL, 3).kind, _decide(FULL, 3).running_bs) == ("req_graph", 4)
    assert _decide(TR, 5).reason == "above_largest_size"
    assert _decide(FULL, 5).reason == "above_largest_size"
    assert _decide(TR, 2, is_prefill=True, num_tokens=4).reason == "prefill"  # no prefill bucket recorded
    assert _decide(TR, 2, is_prefill=True, num_tokens=4, token_buckets={"prefill": [4]}).token_graph
    assert _decide(NONE, 2).reason == "nothing_captured"
    assert _decide(FULL, 2, enforce_eager=True).reason == "enforce_eager"
    assert _decide(CUDAGraphMode.FULL_DECODE_ONLY, 2).req_graph
    assert _decide(CUDAGraphMode.FULL_AND_TR_HYBRID, 2).token_graph  # recorded as TR_HYBRID
    # DP: a rank with one token replays the bucket of the group's largest count; above every bucket
    # the whole group runs eagerly.
    assert _decide(TR, 1, num_tokens_across_dp=[1, 3]).running_tokens == 4
    assert _decide(TR, 1, num_tokens_across_dp=[1, 0]).running_tokens == 1
    assert _decide(TR, 1, num_tokens_across_dp=[1, 7]).reason == "above_largest_size"
    # TBO: a request graph of a split bucket is a TBO graph with the bucket's split; an unserved split
    # runs eagerly with the scheduled requests' split.
    assert _decide(FULL, 3, enable_tbo=True).ubatch_split_bs == (2, 2)
    assert _decide(FULL, 2, enable_tbo=True).ubatch_split_bs is None
    assert (_decide(FULL, 5, enable_tbo=True).kind, _decide(FULL, 5, enable_tbo=True).ubatch_split_bs) == ("eager", (3, 2))
    assert _decide(TR, 3, enable_tbo=True).reason == "tbo_split_unserved"
    assert _decide(TR, 2, enable_tbo=True).token_graph


@pytest.mark.spec("004.context.replay-mode")
def test_set_forward_context_turns_a_token_graph_mode_into_replay():
    mode = _decide(TR, 2)
    with atom.in_forward_context(None, None, atom.Context(), forward_mode=mode) as fc:
        assert fc.tr_graph == "replay" and fc.forward_mode is mode
    with atom.in_forward_context(None, None, atom.Context(), forward_mode=_decide(FULL, 2)) as fc:
        assert fc.tr_graph is None
    with pytest.raises(ForwardContextError, match="replays a token bucket"):
        atom.set_forward_context(None, None, atom.Context(), forward_mode=mode, tr_graph="record")


# --- through the runner ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def model():
    return G.build_level_decoder(atom, G.level_config(atom, 0, "NONE"))


@pytest.fixture(scope="module")
def cache():
    return G.kv_cache(atom)


def _runner(model, cache, mode, *, enforce_eager=False, **kw):
    config = G.level_config(atom, 0, mode, sizes=SIZES)
    if enforce_eager:
        config = atom.Config(compilation_config=config.compilation_config, max_num_seqs=config.max_num_seqs, enforce_eager=True)
    return atom.ModelRunner(model, config, kv_cache_data=cache, max_model_len=G.MAX_LEN, progress=io.StringIO(), **kw)


def _step(model, cache, runner, bs, seed, **kw):
    ids, pos, lens = G.decode_step(bs, seed=seed)
    start = len(model.attention_calls)
    with torch.no_grad():
        got = runner.execute(ids, pos, lens, **kw)
    rows = [r for r, _ in model.attention_calls[start:]]
    torch.testing.assert_close(got, G.eager_step_logits(atom, model, cache, ids, pos, lens), atol=ATOL, rtol=0)
    return rows


def test_tbo_graphs_replay_with_the_buckets_split_and_unserved_splits_run_eagerly(model, cache):
    runner = _runner(model, cache, "FULL", enable_tbo=True)
    with torch.no_grad():
        runner.capture_cudagraph()
    # bs 3 replays bucket 4, a TBO graph: its attention (inline under FULL, which the CPU recorder
    # replays on the recorded metadata) runs per microbatch of the bucket's split, 2 + 2, not the
    # 2 + 1 of the three scheduled requests.
    assert _step(model, cache, runner, 3, seed=1) == [2, 2]
    assert runner.counters.replays == 1
    # bs 5 is off the ladder: eager, cut from the 5 scheduled requests (3 + 2).
    assert _step(model, cache, runner, 5, seed=2) == [3, 2]
    # bs 2 does not split.
    assert _step(model, cache, runner, 2, seed=3) == [2]
    assert runner.counters.eager_by_reason == {"above_largest_size": 1}
    eager = _runner(model, cache, "FULL", enable_tbo=True, enforce_eager=True)
    assert _step(model, cache, eager, 4, seed=4) == [2, 2]


@pytest.mark.spec("004.keying.tbo-unserved-eager")
def test_tbo_under_tr_hybrid_replays_unsplit_buckets_and_runs_split_ones_eagerly(model, cache):
    runner = _runner(model, cache, "TR_HYBRID", enable_tbo=True)
    with torch.no_grad():
        runner.capture_cudagraph()
    assert _step(model, cache, runner, 2, seed=5) == [2]  # a token graph: the attention runs live
    assert _step(model, cache, runner, 3, seed=6) == [2, 1]  # split, no split recording: eager 2 + 1
    assert (runner.counters.replays, runner.counters.eager_by_reason) == (1, {"tbo_split_unserved": 1})


def test_a_simulated_dp_group_replays_one_bucket_on_every_rank(model, cache):
    ranks = [_runner(model, cache, "TR_HYBRID", rank=r, dp_size=2) for r in (0, 1)]
    with torch.no_grad():
        for r in ranks:
            r.capture_cudagraph()
    counts = [1, 3]
    seen = []
    for rank, runner in enumerate(ranks):
        assert _step(model, cache, runner, counts[rank], seed=10 + rank, num_tokens_across_dp=counts) == [4]
        seen.append(runner.decide(counts[rank], counts[rank], is_prefill=False, num_tokens_across_dp=counts).running_tokens)
    assert seen == [4, 4]
    with pytest.raises(atom.ConfigError, match="num_tokens_across_dp"):
        ranks[0].execute(torch.zeros(2, dtype=torch.long), torch.ones(2, dtype=torch.long), torch.ones(2, dtype=torch.long), num_tokens_across_dp=[1, 3])


# two real ranks on gloo: a multi-process world, so make slow (the simulated group above is make test's)
@pytest.mark.slow
@pytest.mark.spec("004.tokengraph.dp-largest-bucket")
def test_real_dp_ranks_on_gloo_replay_one_token_bucket(tmp_path):
    """Two ranks in two fresh processes, their token counts gathered over gloo on loopback: both
    replay the token bucket of the larger count (the live attention ran on its 4 rows)."""
    import json
    import multiprocessing

    counts = [1, 3]
    ctx = multiprocessing.get_context("spawn")
    outs = [tmp_path / f"rank{r}.json" for r in (0, 1)]
    procs = [
        ctx.Process(target=G.dp_rank_main, args=("reference.atom", r, counts, str(tmp_path / "init"), str(outs[r])))
        for r in (0, 1)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=240)
    codes = [p.exitcode for p in procs]
    for p in procs:
        if p.is_alive():
            p.kill()
    assert codes == [0, 0], f"rank exit codes {codes}"
    seen = [json.loads(o.read_text()) for o in outs]
    assert [s["group"] for s in seen] == [counts, counts]
    assert [s["rows"] for s in seen] == [[4], [4]]
    assert max(s["diff"] for s in seen) <= ATOL
