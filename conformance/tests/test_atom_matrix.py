"""Contract: every compilation level through the model runner, with every graph mode.

Through the adapter's ``atom()`` capability. Every cell of the matrix runs the production-shaped
decoder (``conformance/models/atom_graph_model.py``: a ``@token_graph @support_torch_compile``
backbone of pre-norm layers whose attention is a splitting op registered with
``direct_register_custom_op(mutates_args=["output"])``, reading the KV cache and metadata from the
forward context by layer name and writing into an output buffer the piece before it allocated with
``zeros_like``; layer 0's op is an eager region, layer 1's is recorded inline) at levels 0-3 (level 2
with Inductor, level 3 with Inductor and with the implementation's own pieces), under each of the
five graph modes, with and without TBO: ``ModelRunner`` captures at every size of a short ladder,
then runs a real prefill (two requests of several new tokens over cached ones) and a decode of
every batch size from 1 to one past the largest, in a shuffled order, each matched against the
uncompiled forward. Each step's report (``step_report(runner)``: which path served it, which
bucket, how many padded rows) is held to the dispatch rules, so a cell that silently ran eagerly,
or padded a step it could replay as it is, fails.

Beside the matrix, on level 0 (the dispatch does not depend on the compiler) with the small level
decoder, whose single eager-region attention gives the clearest message: a simulated DP group of
two ranks replays one token bucket on both, and TBO decode splits buckets and runs an unserved
split eagerly. ``use_cudagraph=False`` captures nothing in every cell. An exception inside a step
leaves no forward context behind.

Cost: each (level, compiler) cell builds its model once and shares it across the five modes, in
a module fixture per cell, all on one xdist worker; a mode runs when a test first reads it, so a
run of one test pays for one mode, and a run of level-0 tests compiles nothing. Level
2 with the implementation's own compiler is left out: it compiles the whole graph, custom attention
op included, and the reference's lowering has no rule for a custom op (docs/atom.md).
"""

from __future__ import annotations

import random
import time

import pytest
import torch

from conformance.harness.evidence import observe_dynamo
from conformance.harness.outcomes import FellBack
from conformance.models import atom_graph_model as G

SIZES = (1, 2, 4)
DECODES = tuple(range(1, max(SIZES) + 2))  # every size up to one above the largest captured
MODES = ("NONE", "FULL", "FULL_DECODE_ONLY", "TR_HYBRID", "FULL_AND_TR_HYBRID")
#: (level, use_inductor): level 0 and 1 compile nothing with either, so they appear once.
CELLS = ((0, True), (1, True), (2, True), (3, True), (3, False))
# float32 pieces from another compiler against eager: sums of at most 64 terms reassociated.
ATOL = 1e-4
TR_MODES = ("TR_HYBRID", "FULL_AND_TR_HYBRID")
FULL_MODES = ("FULL", "FULL_DECODE_ONLY")
NAMES = (
    "Config", "CompilationConfig", "ConfigError", "ModelRunner", "support_torch_compile", "token_graph",
    "eager_region", "direct_register_custom_op", "get_forward_context", "in_forward_context", "AttentionMetaData",
    "Context", "KVCacheTensor", "CUDAGraphMode",
)
#: The per-step report: optional; the evidence tests skip without it, the parity tests do not.
REPORT = "step_report"

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


def _order(mode: str, tbo: bool) -> list[int]:
    """The decode batch sizes in a shuffled order, fixed per mode (a run is reproducible)."""
    return random.Random(f"{mode}-{tbo}").sample(DECODES, len(DECODES))


def _report(atom, runner):
    if atom.missing(REPORT):
        return None
    step = atom.step_report(runner)
    return {k: getattr(step, k, None) for k in ("path", "bucket", "padded_rows", "reason", "ubatch_split_bs")}


def _run_mode(atom, model, cache, config, *, tbo: bool = False) -> dict:
    runner = atom.ModelRunner(model, config, kv_cache_data=cache, max_model_len=G.MAX_LEN, enable_tbo=tbo, progress=_Quiet())
    mode = config.compilation_config.cudagraph_mode
    mode = getattr(mode, "name", mode)
    out: dict = {"steps": {}}
    with torch.no_grad():
        out["capture"] = runner.capture_cudagraph()[1]
        ids, pos, lens, q = G.prefill_step([3, 2], seed=5)
        out["prefill"] = _worst(runner.execute(ids, pos, lens, is_prefill=True, query_lens=q), G.eager_step_logits(atom, model, cache, ids, pos, lens, q))
        out["steps"]["prefill"] = _report(atom, runner)
        out["decode"] = {}
        for bs in _order(mode, tbo):
            ids, pos, lens = G.decode_step(bs, seed=100 + bs)
            out["decode"][bs] = _worst(runner.execute(ids, pos, lens), G.eager_step_logits(atom, model, cache, ids, pos, lens))
            out["steps"][bs] = _report(atom, runner)
            if out["capture"] and bs <= max(SIZES):
                # What the runner left in its buffers: the step's rows, then padding (token 0).
                bucket = min(s for s in SIZES if s >= bs)
                out.setdefault("buffers", {})[bs] = runner.forward_vars["input_ids"][:bucket].tolist() == ids.tolist() + [0] * (bucket - bs)
        if tbo:
            return out
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


class _Cell:
    """One (level, compiler) cell: the production decoder built once, and each of its runs (every
    mode with and without TBO, and ``use_cudagraph=False``) made when a test first reads it, so a
    run of one test (the selfcheck's mutant runs) pays for one mode. ``cell["dynamo_graphs"]``
    makes every run first: it counts the Dynamo graphs of all of them."""

    def __init__(self, atom, key, root: str, evidence):
        self.atom, self.key, self.root = atom, key, root
        self.evidence = evidence  # what the compiled calls of all its runs ran
        level, inductor = key
        self.graphs = _dynamo_graphs()
        self.cache = G.production_kv_cache(atom)
        self.model = G.build_production_decoder(atom, G.production_config(atom, level, "NONE", use_inductor=inductor, cache_dir=root))
        self.seen: dict = {"key": key}

    def __getitem__(self, what):
        if what not in self.seen:
            self.seen[what] = self._run(what)
        return self.seen[what]

    def _run(self, what):
        level, inductor = self.key
        if what == "dynamo_graphs":
            for run in [*MODES, *(("tbo", mode) for mode in MODES), "use_cudagraph_off"]:
                self[run]
            return _dynamo_graphs() - self.graphs
        if what == "use_cudagraph_off":  # no capture whatever the mode
            config = G.production_config(self.atom, level, "FULL", use_inductor=inductor, cache_dir=self.root, use_cudagraph=False)
            return _run_mode(self.atom, self.model, self.cache, config)
        tbo, mode = what if isinstance(what, tuple) else (None, what)
        if mode not in MODES:
            raise KeyError(what)
        config = G.production_config(self.atom, level, mode, use_inductor=inductor, cache_dir=self.root)
        return _run_mode(self.atom, self.model, self.cache, config, tbo=tbo is not None)


@pytest.fixture(scope="module", params=CELLS, ids=lambda c: CELL_IDS[c])
def cell(request, atom, tmp_path_factory):
    """One (level, compiler) cell (:class:`_Cell`); tests read what it saw. Nothing is compiled
    until a test of the cell runs, so a run of level-0 tests compiles nothing."""
    start = time.perf_counter()
    torch._dynamo.reset()
    root = str(tmp_path_factory.mktemp(f"atom_matrix_{CELL_IDS[request.param]}"))
    # what the compiled calls of every backend the cell uses ran (ATOM's own, Inductor, the pieces'),
    # over all its runs: a compiled graph is shared by the modes that follow the first
    with observe_dynamo() as evidence:
        yield _Cell(atom, request.param, root, evidence)
    print(f"\natom matrix: cell {CELL_IDS[request.param]} took {time.perf_counter() - start:.1f} s")


@pytest.mark.parametrize("tbo", [False, True], ids=["plain", "tbo"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.spec("004.modes.none-no-capture", "004.modes.full-decode-only", "004.replay.equals-eager", "004.piecewise.independent-of-graph-mode")
def test_prefill_and_every_decode_match_eager(cell, mode, tbo):
    seen = cell[("tbo", mode)] if tbo else cell[mode]
    assert seen["prefill"] <= ATOL, f"prefill |diff| {seen['prefill']}"
    assert {bs: d for bs, d in seen["decode"].items() if not d <= ATOL} == {}, "batch size -> worst |diff|"
    if not tbo:
        assert seen["live"][0] <= ATOL
    level = cell.key[0]
    eager = cell.evidence.ran_eagerly()
    if level >= 2 and eager is not None:
        # levels 2 and 3 compile: a compiled call that ran its graph's ops as ATen kernels did not
        # (level 1 is Dynamo with the eager backend by definition)
        raise FellBack(f"level {level}: {eager}")


def _expected_path(mode: str, bs: int, tbo: bool) -> dict:
    """The dispatch rules (docs/atom.md) for a decode of ``bs`` requests under ``mode``."""
    fits = [s for s in SIZES if s >= bs]
    bucket = fits[0] if fits else None
    splits = lambda n: ((n + 1) // 2, n // 2) if tbo and n > 2 else None  # noqa: E731
    if mode == "NONE":
        return {"path": "eager", "bucket": None, "padded_rows": 0, "ubatch_split_bs": splits(bs)}
    if bucket is None:
        return {"path": "eager", "bucket": None, "padded_rows": 0, "reason": "above_largest_size", "ubatch_split_bs": splits(bs)}
    if mode in TR_MODES:
        if splits(bucket):  # token graphs have no split recording
            return {"path": "eager", "bucket": None, "padded_rows": 0, "reason": "tbo_split_unserved", "ubatch_split_bs": splits(bs)}
        return {"path": "token_graph", "bucket": bucket, "padded_rows": bucket - bs, "reason": "", "ubatch_split_bs": None}
    return {"path": "req_graph", "bucket": bucket, "padded_rows": bucket - bs, "reason": "", "ubatch_split_bs": splits(bucket)}


@pytest.mark.parametrize("tbo", [False, True], ids=["plain", "tbo"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.spec("004.replay.dispatch-rules", "004.keying.request-bucket", "004.keying.tbo-split", "004.modes.full-and-tr-hybrid",
                  "004.modes.full-decode-only")
def test_each_step_reports_the_path_the_dispatch_rules_give_it(atom, cell, mode, tbo):
    # The evidence that a replay happened: a cell that silently ran a step eagerly, replayed another
    # bucket, or padded a step that fits a captured size exactly must fail here, not pass on parity.
    if atom.missing(REPORT):
        pytest.skip(f"the ATOM capability has no {REPORT}: the path of each step is not observable")
    seen = cell[("tbo", mode)] if tbo else cell[mode]
    prefill = seen["steps"]["prefill"]
    assert (prefill["path"], prefill["reason"]) == ("eager", "prefill"), prefill
    wrong = {}
    for bs, step in seen["steps"].items():
        if bs == "prefill":
            continue
        want = _expected_path(mode, bs, tbo)
        got = {k: step[k] for k in want}
        if got != want:
            wrong[bs] = (got, want)
    assert wrong == {}, "batch size -> (reported, expected by the dispatch rules)"


@pytest.mark.parametrize("mode", [m for m in MODES if m != "NONE"])
@pytest.mark.spec("004.modes.split-op-not-break", "004.modes.eager-regions-live", "004.replay.equals-eager")
def test_a_replayed_step_leaves_its_rows_then_padding_in_the_recorded_buffers(cell, mode):
    # Padding is written every step: stale rows of an earlier step never stand in the bucket.
    buffers = cell[mode]["buffers"]
    assert {bs: ok for bs, ok in buffers.items() if not ok} == {}, "batch size -> buffer holds the step, then token 0"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.spec("004.modes.full-whole-model", "004.modes.none-no-capture")
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
    assert seen["static_holds_live"], "the replay did not read the live inputs through the recorded buffers"


@pytest.mark.parametrize("mode", [m for m in MODES if m != "NONE"])
@pytest.mark.spec("004.modes.tr-hybrid-token-graphs", "004.modes.eager-regions-live")
def test_token_graphs_run_the_attention_live_and_request_graphs_do_not(cell, mode):
    calls = cell[mode]["live"][1]
    live = [c for c in calls if c[1:] == (2, 5)]  # the live step's rows and span
    if mode in TR_MODES:
        assert ("layer0", 2, 5) in live, f"TR_HYBRID: the eager region did not run with the live metadata (calls {calls})"
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


@pytest.mark.spec("004.context.lifecycle")
def test_an_exception_inside_a_step_leaves_no_forward_context_behind(atom, tmp_path):
    # A context left set after a failed step would hand that step's metadata to the next one (or
    # refuse the next one): the block form resets on error, and so does the runner's step.
    attn = atom.AttentionMetaData(max_seqlen_q=1, max_seqlen_k=1, context_lens=torch.ones(1, dtype=torch.long))
    ctx = atom.Context(positions=torch.zeros(1, dtype=torch.long), batch_size=1, running_bs=1, running_tokens=1)
    with pytest.raises(RuntimeError, match="raised inside the block"):
        with atom.in_forward_context(attn, None, ctx):
            raise RuntimeError("raised inside the block")
    assert atom.get_forward_context().context is None, "the forward context stayed set after the block raised"
    root = str(tmp_path)
    model = G.build_production_decoder(atom, G.production_config(atom, 0, "NONE", cache_dir=root))
    cache = G.production_kv_cache(atom)
    config = G.production_config(atom, 0, "TR_HYBRID", cache_dir=root)
    runner = atom.ModelRunner(model, config, kv_cache_data=cache, max_model_len=G.MAX_LEN, progress=_Quiet())
    with torch.no_grad():
        runner.capture_cudagraph()
        ids, pos, lens = G.decode_step(2, seed=9)
        with pytest.raises((IndexError, RuntimeError)):  # token ids past the vocabulary: the embedding raises
            runner.execute(ids + G.VOCAB, pos, lens)
        assert atom.get_forward_context().context is None, "the forward context stayed set after a step raised"
        got = runner.execute(ids, pos, lens)
    assert _worst(got, G.eager_step_logits(atom, model, cache, ids, pos, lens)) <= ATOL
