"""Contract: every compilation level through the model runner, with every graph mode.

Through the adapter's ``atom()`` capability. The level decoder (``conformance/_atom_graph_model.py``:
a ``@token_graph @support_torch_compile`` backbone whose attention is a splitting op implemented
as an eager region reading the forward context) runs at levels 0-3, level 2 and 3 with Inductor
and level 3 with the implementation's own pieces (``use_inductor=False``), under each of the five
graph modes: ``ModelRunner`` captures at every size of a short ladder, then runs a real prefill
(two requests of several new tokens over cached ones) and a decode of every batch size from 1 to
one above the largest, each matched against the uncompiled forward.

Cost: each (level, compiler) cell compiles its model once and shares it across the five modes
(token-graph recordings are kept by the model, so the TR_HYBRID modes share them too), all in one
module fixture on one xdist worker. Level 2 with the implementation's own compiler is left out: it
compiles the whole graph, custom attention op included, and the reference's lowering has no rule
for a custom op (docs/atom.md).
"""

from __future__ import annotations

import time

import pytest
import torch

from conformance import _atom_graph_model as G

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
    missing = [n for n in NAMES if not hasattr(module, n)]
    if missing:
        pytest.skip(f"not supported by {impl.name}: ATOM runner levels (the ATOM module has no {', '.join(missing)})")
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
        got = runner.execute(ids, pos, lens, max_seqlen_k=5)
        seen_by_attention = model.attention_calls[-1]
        out["live"] = (_worst(got, G.eager_step_logits(atom, model, cache, ids, pos, lens)), seen_by_attention)
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


@pytest.fixture(scope="module")
def matrix(atom, tmp_path_factory):
    """Every cell and mode, run once; tests read what it saw. Wall time per cell is kept."""
    seen: dict = {"cells": {}, "seconds": {}}
    cache = G.kv_cache(atom)
    for level, inductor in CELLS:
        start = time.perf_counter()
        torch._dynamo.reset()
        root = str(tmp_path_factory.mktemp(f"atom_matrix_{level}_{int(inductor)}"))
        graphs = _dynamo_graphs()
        model = G.build_level_decoder(atom, G.level_config(atom, level, "NONE", use_inductor=inductor, cache_dir=root))
        cell = {}
        for mode in MODES:
            config = G.level_config(atom, level, mode, use_inductor=inductor, cache_dir=root)
            cell[mode] = _run_mode(atom, model, cache, config)
        cell["dynamo_graphs"] = _dynamo_graphs() - graphs
        if (level, inductor) == (3, True):
            # use_cudagraph=False: no capture whatever the mode.
            off = G.level_config(atom, level, "TR_HYBRID", use_inductor=inductor, cache_dir=root, use_cudagraph=False)
            cell["use_cudagraph_off"] = _run_mode(atom, model, cache, off)
        seen["cells"][(level, inductor)] = cell
        seen["seconds"][(level, inductor)] = round(time.perf_counter() - start, 1)
    return seen


CASES = [pytest.param(level, inductor, mode, id=f"L{level}-{'inductor' if inductor else 'own'}-{mode}") for level, inductor in CELLS for mode in MODES]


@pytest.mark.parametrize("level,inductor,mode", CASES)
def test_prefill_and_every_decode_match_eager(matrix, level, inductor, mode):
    seen = matrix["cells"][(level, inductor)][mode]
    assert seen["prefill"] <= ATOL, f"prefill |diff| {seen['prefill']}"
    assert {bs: d for bs, d in seen["decode"].items() if not d <= ATOL} == {}, "batch size -> worst |diff|"
    assert seen["live"][0] <= ATOL


@pytest.mark.parametrize("level,inductor,mode", CASES)
def test_the_ladder_is_captured_and_decodes_within_it_replay(matrix, level, inductor, mode):
    seen = matrix["cells"][(level, inductor)][mode]
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


@pytest.mark.parametrize("level,inductor,mode", [c for c in CASES if c.values[2] != "NONE"])
def test_token_graphs_run_the_attention_live_and_request_graphs_replay_it(matrix, level, inductor, mode):
    rows, span = matrix["cells"][(level, inductor)][mode]["live"][1]
    assert rows == 2
    assert span == (5 if mode in TR_MODES else G.MAX_LEN), "TR_HYBRID: the live step's metadata; FULL: the capture's"


def test_level_0_runs_no_dynamo_and_level_1_is_compiled_by_the_runner(matrix):
    assert matrix["cells"][(0, True)]["dynamo_graphs"] == 0
    assert matrix["cells"][(1, True)]["dynamo_graphs"] > 0, "level 1 through the runner ran no Dynamo frame"


def test_use_cudagraph_false_captures_nothing_whatever_the_mode(matrix):
    seen = matrix["cells"][(3, True)]["use_cudagraph_off"]
    assert seen["capture"] == []
    assert seen["replays"] == 0
    assert seen["prefill"] <= ATOL and max(seen["decode"].values()) <= ATOL


def test_invalid_combinations_are_typed_errors_naming_the_field(atom, tmp_path):
    plain = torch.nn.Linear(2, 2)
    with pytest.raises(atom.ConfigError) as err:
        atom.ModelRunner(plain, G.level_config(atom, 3, "FULL", cache_dir=str(tmp_path)))
    assert err.value.field == "level"
    with pytest.raises(atom.ConfigError) as err:
        atom.ModelRunner(plain, G.level_config(atom, 0, "TR_HYBRID", cache_dir=str(tmp_path)))
    assert err.value.field == "cudagraph_mode"

