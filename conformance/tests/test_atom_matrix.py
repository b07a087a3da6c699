"""Contract: every compilation level through the model runner, with every graph mode.

Through the adapter's ``atom()`` capability. The level decoder (``conformance/models/atom_graph_model.py``:
a ``@token_graph @support_torch_compile`` backbone whose attention is a splitting op implemented
as an eager region reading the forward context) runs at levels 0-3, level 2 and 3 with Inductor
and level 3 with the implementation's own pieces (``use_inductor=False``), under each of the five
graph modes: ``ModelRunner`` captures at every size of a short ladder, then runs a real prefill
(two requests of several new tokens over cached ones) and a decode of every batch size from 1 to
one above the largest, each matched against the uncompiled forward.

Beside the matrix, on level 0 (the dispatch does not depend on the compiler): a simulated DP group
of two ranks replays one token bucket on both, and TBO decode splits buckets and runs an unserved
split eagerly. ``use_cudagraph=False`` captures nothing in every cell.

Cost: each (level, compiler) cell compiles its model once and shares it across the five modes
(token-graph recordings are kept by the model, so the TR_HYBRID modes share them too), in a module
fixture per cell, all on one xdist worker; a run of level-0 tests compiles nothing. Level 2 with the implementation's own compiler is left out: it
compiles the whole graph, custom attention op included, and the reference's lowering has no rule
for a custom op (docs/atom.md).
"""

from __future__ import annotations

import time

import pytest
import torch

from conformance.models import atom_graph_model as G

SIZES = (1, 2, 4)
DECODES = tuple(range(1, max(SIZES) + 2))  # every size up to one above the largest captured
MODES = ("NONE", "FULL", "FULL_DECODE_ONLY", "TR_HYBRID", "FULL_AND_TR_HYBRID")
#: (level, use_inductor): level 0 and 1 compile nothing with either, so they appear once.
CELLS = ((0, True), (1, True), (2, True), (3, True), (3, False))
# float32 pieces from another compiler against eager: sums of at most 64 terms reassociated.
ATOL = 1e-4
TR_MODES = ("TR_HYBRID", "FULL_AND_TR_HYBRID")
NAMES = (
    "Config", "CompilationConfig", "ConfigError", "ModelRunner", "support_torch_compile", "token_graph",
    "eager_region", "direct_register_custom_op", "get_forward_context", "in_forward_context", "AttentionMetaData",
    "Context", "KVCacheTensor", "CUDAGraphMode",
)

pytestmark = pytest.mark.xdist_group("atom_matrix")


@pytest.fixture(scope="module")
def atom(impl):
    module = impl.atom()
    missing = module.missing(*NAMES)
    if missing:
        pytest.skip(f"not supported by {impl.name}: ATOM runner levels (the ATOM capability has no {', '.join(missing)})")
    return module


def _dynamo_graphs() -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def _worst(got: torch.Tensor, want: torch.Tensor) -> float:
    return (got - want).abs().max().item() if got.shape == want.shape else float("inf")


def _run_mode(atom, model, cache, config) -> dict:
    runner = atom.ModelRunner(model, config, kv_cache_data=cache, max_model_len=G.MAX_LEN, progress=_Quiet())
    out: dict = {}
    with torch.no_grad():
        out["capture"] = runner.capture_cudagraph()[1]
        ids, pos, lens, q = G.prefill_step([3, 2], seed=5)
        out["prefill"] = _worst(runner.execute(ids, pos, lens, is_prefill=True, query_lens=q), G.eager_step_logits(atom, model, cache, ids, pos, lens, q))
        out["decode"] = {}
        for bs in DECODES:
            ids, pos, lens = G.decode_step(bs, seed=100 + bs)
            out["decode"][bs] = _worst(runner.execute(ids, pos, lens), G.eager_step_logits(atom, model, cache, ids, pos, lens))
        # Live metadata: a decode whose attention reads at most 5 cached entries. A token graph runs
        # the eager region live (it sees 5); a request graph replays the capture's (the cache length).
        ids, pos, lens = G.decode_step(2, seed=7)
        lens = lens.clamp(max=5)
        before = len(model.attention_calls)
        got = runner.execute(ids, pos, lens, max_seqlen_k=5)
        calls = list(model.attention_calls[before:])
        out["live"] = (_worst(got, G.eager_step_logits(atom, model, cache, ids, pos, lens)), calls)
        out["static_holds_live"] = bool(out["capture"]) and torch.equal(runner.forward_vars["input_ids"][:2], ids)
    out["replays"] = runner.counters.replays
    out["eager"] = runner.counters.eager
    out["eager_by_reason"] = dict(runner.counters.eager_by_reason)
    return out


class _Quiet:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


CELL_IDS = {(0, True): "L0", (1, True): "L1", (2, True): "L2-inductor", (3, True): "L3-inductor", (3, False): "L3-own"}


@pytest.fixture(scope="module", params=CELLS, ids=lambda c: CELL_IDS[c])
def cell(request, atom, tmp_path_factory):
    """One (level, compiler) cell: its model compiled once, every mode run on it; tests read what
    it saw. A cell is computed when the first of its tests runs, so a run of level-0 tests compiles
    nothing."""
    level, inductor = request.param
    start = time.perf_counter()
    torch._dynamo.reset()
    cache = G.kv_cache(atom)
    root = str(tmp_path_factory.mktemp(f"atom_matrix_{CELL_IDS[request.param]}"))
    graphs = _dynamo_graphs()
    model = G.build_level_decoder(atom, G.level_config(atom, level, "NONE", use_inductor=inductor, cache_dir=root))
    seen: dict = {"key": request.param}
    for mode in MODES:
        config = G.level_config(atom, level, mode, use_inductor=inductor, cache_dir=root)
        seen[mode] = _run_mode(atom, model, cache, config)
    seen["dynamo_graphs"] = _dynamo_graphs() - graphs
    # use_cudagraph=False: no capture whatever the mode.
    off = G.level_config(atom, level, "FULL", use_inductor=inductor, cache_dir=root, use_cudagraph=False)
    seen["use_cudagraph_off"] = _run_mode(atom, model, cache, off)
    seen["seconds"] = round(time.perf_counter() - start, 1)
    print(f"\natom matrix: cell {CELL_IDS[request.param]} took {seen['seconds']} s")
    return seen


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.spec("004.modes.none-no-capture", "004.modes.full-decode-only", "004.replay.equals-eager", "004.piecewise.independent-of-graph-mode")
def test_prefill_and_every_decode_match_eager(cell, mode):
    seen = cell[mode]
    assert seen["prefill"] <= ATOL, f"prefill |diff| {seen['prefill']}"
    assert {bs: d for bs, d in seen["decode"].items() if not d <= ATOL} == {}, "batch size -> worst |diff|"
    assert seen["live"][0] <= ATOL


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.spec("004.modes.full-whole-model")
def test_the_ladder_is_captured_and_decodes_within_it_replay(cell, mode):
    seen = cell[mode]
    steps = 1 + len(DECODES) + 1  # the prefill, the decodes, the live-metadata decode
    if mode == "NONE":
        assert seen["capture"] == []
        assert (seen["replays"], seen["eager"]) == (0, steps)
        return
    assert seen["capture"] == list(SIZES)
    in_ladder = sum(1 for bs in DECODES if bs <= max(SIZES)) + 1
    assert seen["replays"] == in_ladder
    assert seen["eager_by_reason"] == {"prefill": 1, "above_largest_size": 1}
    if mode != "FULL_AND_TR_HYBRID":
        # (FULL_AND_TR_HYBRID runs after TR_HYBRID on the same model: its token graphs are the ones
        # TR_HYBRID recorded, reading TR_HYBRID's runner's buffers.)
        assert seen["static_holds_live"], "the replay did not read the live inputs through the recorded buffers"


@pytest.mark.parametrize("mode", [m for m in MODES if m != "NONE"])
@pytest.mark.spec("004.modes.tr-hybrid-token-graphs")
def test_token_graphs_run_the_attention_live_and_request_graphs_do_not(cell, mode):
    calls = cell[mode]["live"][1]
    live = [c for c in calls if c == (2, 5)]  # the live step's rows and span
    if mode in TR_MODES:
        assert live, f"TR_HYBRID: the eager region did not run with the live metadata (calls {calls})"
    else:
        assert not live, f"FULL: the request graph ran the attention with the live metadata (calls {calls})"


@pytest.mark.spec("004.modes.use-cudagraph-false")
def test_use_cudagraph_false_captures_nothing_whatever_the_mode(cell):
    seen = cell["use_cudagraph_off"]
    assert seen["capture"] == []
    assert seen["replays"] == 0
    assert seen["prefill"] <= ATOL and max(seen["decode"].values()) <= ATOL


@pytest.mark.spec("004.levels.level-0-eager", "004.levels.level-1-runner-compiles")
def test_only_level_0_runs_without_dynamo_and_level_1_is_compiled_by_the_runner(cell):
    level = cell["key"][0]
    if level == 0:
        assert cell["dynamo_graphs"] == 0
    else:
        assert cell["dynamo_graphs"] > 0, f"level {level} through the runner ran no Dynamo frame"


def _fresh_calls(model, before: int) -> list:
    return [rows for rows, _ in model.attention_calls[before:]]


@pytest.fixture(scope="module")
def level0(atom, tmp_path_factory):
    """A level-0 decoder for the checks whose dispatch does not depend on the compiler."""
    root = str(tmp_path_factory.mktemp("atom_matrix_dispatch"))
    return {"model": G.build_level_decoder(atom, G.level_config(atom, 0, "NONE", cache_dir=root)), "cache": G.kv_cache(atom), "root": root}


@pytest.mark.spec("004.capture.symmetric-dp", "004.tokengraph.dp-largest-bucket")
def test_a_dp_group_replays_the_bucket_of_its_largest_token_count_on_every_rank(atom, level0):
    cell = level0
    model, cache = cell["model"], cell["cache"]
    counts = [1, 3]  # rank 0 scheduled one request, rank 1 three: both replay the bucket of 4
    for rank in (0, 1):
        config = G.level_config(atom, 0, "TR_HYBRID", cache_dir=cell["root"])
        runner = atom.ModelRunner(model, config, kv_cache_data=cache, max_model_len=G.MAX_LEN, rank=rank, dp_size=2, progress=_Quiet())
        with torch.no_grad():
            runner.capture_cudagraph()
            ids, pos, lens = G.decode_step(counts[rank], seed=50 + rank)
            before = len(model.attention_calls)
            got = runner.execute(ids, pos, lens, num_tokens_across_dp=counts)
            calls = _fresh_calls(model, before)
        assert calls == [4], f"rank {rank} ran the attention on {calls} rows, not the group's bucket of 4"
        assert _worst(got, G.eager_step_logits(atom, model, cache, ids, pos, lens)) <= ATOL


@pytest.mark.spec("004.keying.tbo-split", "004.keying.tbo-unserved-eager")
def test_tbo_decode_splits_a_bucket_in_two_and_an_unserved_split_runs_eagerly(atom, level0):
    cell = level0
    model, cache = cell["model"], cell["cache"]
    seen = {}
    for mode in ("FULL", "TR_HYBRID"):
        config = G.level_config(atom, 0, mode, cache_dir=cell["root"])
        runner = atom.ModelRunner(model, config, kv_cache_data=cache, max_model_len=G.MAX_LEN, enable_tbo=True, progress=_Quiet())
        with torch.no_grad():
            runner.capture_cudagraph()
            for bs in (2, 3, 5):
                ids, pos, lens = G.decode_step(bs, seed=60 + bs)
                before = len(model.attention_calls)
                got = runner.execute(ids, pos, lens)
                seen[(mode, bs)] = _fresh_calls(model, before)
                assert _worst(got, G.eager_step_logits(atom, model, cache, ids, pos, lens)) <= ATOL, (mode, bs)
        seen[mode] = (runner.counters.replays, runner.counters.eager)
    # Off the ladder: eager, two microbatches cut from the five scheduled requests (3 + 2).
    assert seen[("FULL", 5)] == [3, 2] and seen[("TR_HYBRID", 5)] == [3, 2]
    # TR_HYBRID: a bucket of 2 does not split (a token graph, the attention live on 2 rows); three
    # requests split and token graphs have no split recording: eager, 2 + 1.
    assert seen[("TR_HYBRID", 2)] == [2] and seen[("TR_HYBRID", 3)] == [2, 1]
    assert seen["TR_HYBRID"] == (1, 2)
    # FULL: 2 and 3 replay request graphs (3 pads to the TBO graph of 4); never on the scheduled split.
    assert seen["FULL"] == (2, 1)
    assert [2, 1] not in (seen[("FULL", 2)], seen[("FULL", 3)])


@pytest.mark.spec("004.config.bad-field")
def test_invalid_combinations_are_typed_errors_naming_the_field(atom, tmp_path):
    plain = torch.nn.Linear(2, 2)
    with pytest.raises(atom.ConfigError) as err:
        atom.ModelRunner(plain, G.level_config(atom, 3, "FULL", cache_dir=str(tmp_path)))
    assert err.value.field == "level"
    with pytest.raises(atom.ConfigError) as err:
        atom.ModelRunner(plain, G.level_config(atom, 0, "TR_HYBRID", cache_dir=str(tmp_path)))
    assert err.value.field == "cudagraph_mode"
