"""Contract: the statements of the ATOM design that no scenario test observes on its own.

Through the adapter's ``atom()`` capability only. The names, values and defaults the design quotes
(levels, graph modes and their helpers, every ``CompilationConfig`` and ``Config`` default, the
forward context's fields), what a configuration resolves to at level 3, the capture loop as a
model sees it (a probe: a ``@token_graph`` unit whose eager region logs the forward context it
runs under, at level 0 so nothing compiles), custom-op registration, and the level-3 files that
only a compile writes (those tests are slow: three small compiles with the implementation's own
piece compiler, about 15 s).

Every test here asserts what a user of the design would see; each statement it checks is named by
its ``spec`` marker, and ``conformance/selfcheck/mutants_atom.py`` holds a broken reference for
each quoted value that one of these tests must catch.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch
from torch import nn

from conformance.models import atom_model as M

pytestmark = pytest.mark.xdist_group("atom_statements")

SIZES = [1, 2, 4]


@pytest.fixture(scope="module")
def atom(impl):
    return impl.atom()


def _compilation(atom, **kw):
    return atom.Config(max_num_seqs=512, compilation_config=atom.CompilationConfig(**kw))


# --- names, values, helpers -----------------------------------------------------------------------

LEVEL_NAMES = {0: "NO_COMPILATION", 1: "DYNAMO_AS_IS", 2: "DYNAMO_ONCE", 3: "PIECEWISE"}


@pytest.mark.spec("004.levels.names")
def test_each_level_number_carries_the_seeds_name(atom):
    got = {}
    for number in LEVEL_NAMES:
        level = atom.CompilationConfig(level=number).level
        got[number] = (getattr(level, "name", None), int(level))
    assert got == {n: (name, n) for n, name in LEVEL_NAMES.items()}, "level number -> (name, number)"


MODE_VALUES = {"NONE": 0, "TR_HYBRID": 1, "FULL": 2, "FULL_DECODE_ONLY": (2, 0), "FULL_AND_TR_HYBRID": (2, 1)}


@pytest.mark.spec("004.modes.values")
def test_each_graph_mode_has_the_seeds_value(atom):
    got = {name: getattr(getattr(atom.CUDAGraphMode, name, None), "value", None) for name in MODE_VALUES}
    assert got == MODE_VALUES, "graph mode -> value"


#: mode -> (decode_mode, mixed_mode, separate_routine, has_full_cudagraphs, uses_tr_hybrid, max_cudagraph_mode)
HELPERS = {
    "NONE": ("NONE", "NONE", False, False, False, "NONE"),
    "TR_HYBRID": ("TR_HYBRID", "TR_HYBRID", False, False, True, "TR_HYBRID"),
    "FULL": ("FULL", "FULL", False, True, False, "FULL"),
    "FULL_DECODE_ONLY": ("FULL", "NONE", True, True, False, "FULL"),
    "FULL_AND_TR_HYBRID": ("FULL", "TR_HYBRID", True, True, True, "FULL"),
}
HELPER_NAMES = ("decode_mode", "mixed_mode", "separate_routine", "has_full_cudagraphs", "uses_tr_hybrid", "max_cudagraph_mode")


def _helper(atom, helper: str) -> dict:
    """``helper`` called on every mode: mode -> what it returned (a mode by name, else the value),
    with a wrong return type shown as such."""
    index = HELPER_NAMES.index(helper)
    got, want = {}, {}
    for name, row in HELPERS.items():
        value = getattr(getattr(atom.CUDAGraphMode, name), helper)()
        if isinstance(row[index], bool):
            got[name] = value if isinstance(value, bool) else f"not a bool: {value!r}"
        else:
            got[name] = value.name if isinstance(value, atom.CUDAGraphMode) else f"not a CUDAGraphMode: {value!r}"
        want[name] = row[index]
    return {"got": got, "want": want}


@pytest.mark.spec("004.modes.helpers", "004.modes.helper-decode-mode")
def test_decode_mode_is_the_pairs_first_element(atom):
    seen = _helper(atom, "decode_mode")
    assert seen["got"] == seen["want"], "decode_mode(): mode -> returned"


@pytest.mark.spec("004.modes.helpers", "004.modes.helper-mixed-mode")
def test_mixed_mode_is_the_pairs_second_element(atom):
    seen = _helper(atom, "mixed_mode")
    assert seen["got"] == seen["want"], "mixed_mode(): mode -> returned"


@pytest.mark.spec("004.modes.helpers", "004.modes.helper-separate-routine")
def test_separate_routine_is_true_for_the_pair_modes_only(atom):
    seen = _helper(atom, "separate_routine")
    assert seen["got"] == seen["want"], "separate_routine(): mode -> returned"


@pytest.mark.spec("004.modes.helpers", "004.modes.helper-has-full")
def test_has_full_cudagraphs_when_either_part_is_full(atom):
    seen = _helper(atom, "has_full_cudagraphs")
    assert seen["got"] == seen["want"], "has_full_cudagraphs(): mode -> returned"


@pytest.mark.spec("004.modes.helpers", "004.modes.helper-uses-tr-hybrid")
def test_uses_tr_hybrid_when_either_part_is_tr_hybrid(atom):
    seen = _helper(atom, "uses_tr_hybrid")
    assert seen["got"] == seen["want"], "uses_tr_hybrid(): mode -> returned"


@pytest.mark.spec("004.modes.helpers", "004.modes.helper-max-mode")
def test_max_cudagraph_mode_is_the_highest_valued_part(atom):
    seen = _helper(atom, "max_cudagraph_mode")
    assert seen["got"] == seen["want"], "max_cudagraph_mode(): mode -> returned"


# --- configuration defaults and what level 3 resolves ---------------------------------------------

#: The seed's table of CompilationConfig fields and their defaults.
COMPILATION_DEFAULTS = {
    "level": 0, "use_cudagraph": True, "cudagraph_capture_sizes": None, "cuda_graph_sizes": [512],
    "cudagraph_mode": None, "splitting_ops": None, "cudagraph_copy_inputs": False, "use_inductor": True,
    "compile_sizes": None, "inductor_compile_config": {}, "debug_dump_path": "", "cache_dir": "",
}


@pytest.mark.spec(
    "004.config.defaults", "004.config.default-level", "004.config.default-use-cudagraph",
    "004.config.default-capture-sizes", "004.config.default-cuda-graph-sizes", "004.config.default-cudagraph-mode",
    "004.config.default-splitting-ops", "004.config.default-copy-inputs", "004.config.default-use-inductor",
    "004.config.default-compile-sizes", "004.config.default-inductor-config", "004.config.default-debug-dump-path",
    "004.config.default-cache-dir",
)
def test_compilation_config_defaults_are_the_seeds(atom):
    cc = atom.CompilationConfig()
    got = {name: getattr(cc, name, "<absent>") for name in COMPILATION_DEFAULTS}
    got["level"] = int(got["level"]) if isinstance(got["level"], int) else got["level"]
    assert got == COMPILATION_DEFAULTS, "CompilationConfig() field -> default"


@pytest.mark.spec("004.config.default-enforce-eager", "004.config.default-config-capture-sizes", "004.config.default-compilation-config")
def test_config_defaults_are_the_seeds(atom):
    config = atom.Config()
    got = {
        "enforce_eager": config.enforce_eager,
        "capture_sizes": config.capture_sizes,
        "compilation_config.level": int(config.compilation_config.level),
        "compilation_config is fresh": config.compilation_config is not atom.Config().compilation_config,
    }
    assert got == {"enforce_eager": False, "capture_sizes": None, "compilation_config.level": 0, "compilation_config is fresh": True}


@pytest.mark.spec("004.levels.level-3-post-init", "004.levels.level-3-splitting-ops", "004.decision.presets")
def test_level_3_resolves_splitting_ops_sizes_and_mode(atom):
    """``CompilationConfig(level=3)`` in a ``Config``: the two attention ops split the graph (under
    the implementation's custom-op namespace: docs/atom.md), the ladder of ``[512]``, TR_HYBRID."""
    config = _compilation(atom, level=3)
    cc = config.compilation_config
    ops = [op.split(".", 1)[-1] for op in (cc.splitting_ops or [])]
    assert ops == ["unified_attention_with_output", "mla_attention"], f"splitting_ops {cc.splitting_ops}"
    assert len({op.split(".", 1)[0] for op in cc.splitting_ops}) == 1, "one namespace for both ops"
    assert cc.cuda_graph_sizes == [512]
    assert config.capture_sizes == [*range(1, 9), *range(16, 513, 16)]
    assert cc.cudagraph_mode == atom.CUDAGraphMode.TR_HYBRID


@pytest.mark.spec("004.levels.level-3-tr-hybrid-default")
def test_level_3_keeps_a_chosen_mode_and_defaults_to_tr_hybrid(atom):
    chosen = {name: _compilation(atom, level=3, cudagraph_mode=getattr(atom.CUDAGraphMode, name)).compilation_config.cudagraph_mode.name
              for name in ("NONE", "FULL", "FULL_DECODE_ONLY")}
    assert chosen == {"NONE": "NONE", "FULL": "FULL", "FULL_DECODE_ONLY": "FULL_DECODE_ONLY"}, "a chosen mode was replaced"
    assert _compilation(atom, level=3).compilation_config.cudagraph_mode.name == "TR_HYBRID"


@pytest.mark.spec("004.levels.level-3-post-init")
def test_below_level_3_nothing_is_resolved_for_pieces(atom):
    for level in (0, 1, 2):
        config = _compilation(atom, level=level)
        cc = config.compilation_config
        assert (cc.splitting_ops, config.capture_sizes) == (None, None), f"level {level}"
        assert cc.cudagraph_mode in (None, atom.CUDAGraphMode.NONE), f"level {level}: {cc.cudagraph_mode}"


@pytest.mark.spec("004.capture.sizes-explicit-or-ladder")
def test_explicit_capture_sizes_are_used_directly(atom):
    config = _compilation(atom, level=3, cuda_graph_sizes=[48], cudagraph_capture_sizes=[1, 2, 4, 8])
    assert config.capture_sizes == [1, 2, 4, 8], "cudagraph_capture_sizes must override cuda_graph_sizes"


@pytest.mark.spec("004.capture.default-ladder")
def test_one_cuda_graph_size_generates_the_ladder(atom):
    assert _compilation(atom, level=3, cuda_graph_sizes=[40]).capture_sizes == [1, 2, 3, 4, 5, 6, 7, 8, 16, 32]


@pytest.mark.spec("004.capture.several-sizes-as-given")
def test_several_cuda_graph_sizes_are_used_as_given(atom):
    assert _compilation(atom, level=3, cuda_graph_sizes=[24, 3]).capture_sizes == [3, 24]


# --- the compile decorator: what levels 0 and 1 and enforce_eager do -----------------------------


def _probe_class(atom):
    class Doubler(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    return atom.support_torch_compile(Doubler)


@pytest.mark.spec("004.levels.level-0-do-not-compile", "004.levels.level-1-runner-compiles", "004.decorator.base-class")
def test_levels_0_and_1_set_do_not_compile_and_call_forward_directly(atom):
    cls = _probe_class(atom)
    bases = [c.__name__ for c in cls.__mro__]
    assert "TorchCompileWrapperWithCustomDispatcher" in bases, f"the decorated class's bases: {bases}"
    flags = {level: cls(atom_config=_compilation(atom, level=level)).do_not_compile for level in (0, 1, 2, 3)}
    assert flags == {0: True, 1: True, 2: False, 3: False}, "level -> do_not_compile"
    for level in (0, 1):
        model = cls(atom_config=_compilation(atom, level=level))
        model.forward = lambda x: "forward was called"  # an instance's own forward: called as it is
        assert model(torch.ones(2)) == "forward was called", f"level {level}"


@pytest.mark.spec("004.decision.enforce-eager-flag", "004.replay.enforce-eager", "004.config.enforce-eager-skips-compilation")
def test_enforce_eager_skips_compilation_and_graphs(atom):
    config = atom.Config(enforce_eager=True, max_num_seqs=8,
                         compilation_config=atom.CompilationConfig(level=3, cudagraph_mode=atom.CUDAGraphMode.FULL, cudagraph_capture_sizes=[1, 2]))
    assert config.compilation_config.cudagraph_mode == atom.CUDAGraphMode.NONE
    model = _probe_class(atom)(atom_config=config)
    assert model.do_not_compile is True, "enforce_eager at level 3 still compiles the model"
    model.forward = lambda x: "forward was called"
    assert model(torch.ones(2)) == "forward was called"


# --- custom ops -------------------------------------------------------------------------------------

_FAKE_CALLS: list = []


def _scale_into(x: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(x * 3)


def _scale_into_fake(x: torch.Tensor, out: torch.Tensor) -> None:
    _FAKE_CALLS.append(tuple(x.shape))


def _has_kernel(qualname: str, key: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(qualname.replace(".", "::"), key)


@pytest.mark.spec("004.customop.register", "004.customop.cuda-dispatch-key", "004.customop.splitting-op", "004.customop.aiter-namespace")
def test_a_registered_op_runs_mutates_traces_with_its_fake_and_splits(atom):
    name = atom.direct_register_custom_op("statements_scale_into", _scale_into, mutates_args=["out"], fake_impl=_scale_into_fake)
    namespace, _, op_name = name.partition(".")
    assert op_name == "statements_scale_into", f"returned {name!r}, not 'namespace.op_name'"
    op = getattr(getattr(torch.ops, namespace), op_name)
    out = torch.zeros(3)
    assert op(torch.ones(3), out) is None
    assert out.tolist() == [3.0, 3.0, 3.0], "the op did not write its mutated argument"
    from torch._subclasses.fake_tensor import FakeTensorMode

    _FAKE_CALLS.clear()
    with FakeTensorMode() as mode:
        op(mode.from_tensor(torch.ones(5)), mode.from_tensor(torch.zeros(5)))
    assert _FAKE_CALLS == [(5,)], "the fake implementation did not run while tracing"
    assert _has_kernel(name, "CUDA"), "with no dispatch_key the op has no CUDA kernel"
    config = _compilation(atom, level=3, splitting_ops=[name])
    assert config.compilation_config.splitting_ops == [name]


# --- the forward context --------------------------------------------------------------------------

FORWARD_CONTEXT_FIELDS = ("no_compile_layers", "attn_metadata", "kv_cache_data", "context", "dp_metadata", "spec_decode_metadata")


@pytest.mark.spec("004.context.fields", "004.context.lifecycle", "004.context.no-compile-layers")
def test_the_forward_context_carries_the_seeds_fields_and_is_empty_after_a_pass(atom):
    layer = nn.Identity()
    cc = atom.CompilationConfig(static_forward_context={0: layer})
    config = atom.Config(compilation_config=cc)
    attn = atom.AttentionMetaData(max_seqlen_q=1, max_seqlen_k=3)
    ctx = atom.Context(positions=torch.zeros(2, dtype=torch.long), batch_size=2, running_bs=2, running_tokens=2)
    with atom.in_forward_context(attn, config, ctx):
        inside = atom.get_forward_context()
        seen = {f: getattr(inside, f, "<absent>") for f in FORWARD_CONTEXT_FIELDS}
    assert seen["attn_metadata"] is attn and seen["context"] is ctx
    assert "<absent>" not in seen.values(), f"fields missing: {[f for f, v in seen.items() if v == '<absent>']}"
    assert dict(seen["no_compile_layers"]) == {0: layer}, "static_forward_context did not reach no_compile_layers"
    after = atom.get_forward_context()
    empty = {f: getattr(after, f, "<absent>") for f in FORWARD_CONTEXT_FIELDS}
    assert {f: (v or None) for f, v in empty.items()} == dict.fromkeys(FORWARD_CONTEXT_FIELDS), "the reset context is not empty"


@pytest.mark.spec("004.context.context-dataclass")
def test_context_fields_default_as_the_seed_says(atom):
    ctx = atom.Context(positions=torch.zeros(1, dtype=torch.long))
    got = {f: getattr(ctx, f, "<absent>") for f in ("is_prefill", "batch_size", "running_bs", "running_tokens", "is_draft")}
    assert got == {"is_prefill": False, "batch_size": 0, "running_bs": 0, "running_tokens": 0, "is_draft": False}, "Context field -> default"


@pytest.mark.spec("004.keying.request-bucket")
def test_request_bucket_is_running_bs_and_the_draft_tokens(atom):
    got = {(bs, q): atom.request_bucket(bs, q) for bs, q in ((4, 1), (4, 3), (1, 2))}
    assert got == {(4, 1): (4, 0), (4, 3): (4, 2), (1, 2): (1, 1)}, "(running_bs, max_seqlen_q) -> bucket"


# --- the capture loop, as a probe model sees it ---------------------------------------------------


def _probe_model(atom, log: list):
    """A ``@token_graph`` unit whose eager region logs, per call, the forward context it runs under:
    ``(tr_graph, rows, running_bs, is_prefill, max_seqlen_q, num_tokens_across_dp, running_tokens)``."""

    @atom.eager_region
    def probe(h: torch.Tensor) -> torch.Tensor:
        fc = atom.get_forward_context()
        ctx, md, dp = fc.context, fc.attn_metadata, fc.dp_metadata
        log.append((getattr(fc, "tr_graph", None), h.shape[0], ctx.running_bs, ctx.is_prefill, md.max_seqlen_q,
                    list(dp.num_tokens_across_dp) if dp is not None else None, ctx.running_tokens))
        return h * 2

    @atom.token_graph
    class Unit(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(16, 8)
            self.proj = nn.Linear(8, 8)

        def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
            return self.proj(probe(self.embed(input_ids)))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = Unit()
            self.head = nn.Linear(8, 16)

        def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids, positions)

        def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
            return self.head(hidden)

    return Model().eval()


def _capture(atom, mode: str, **runner_kw) -> dict:
    log: list = []
    model = _probe_model(atom, log)
    config = atom.Config(max_num_seqs=8, compilation_config=atom.CompilationConfig(
        cudagraph_mode=getattr(atom.CUDAGraphMode, mode), cudagraph_capture_sizes=[2, 1, 4]))
    progress = io.StringIO()
    runner = atom.ModelRunner(model, config, progress=progress, **runner_kw)
    with torch.no_grad():
        returned = runner.capture_cudagraph()
        capture_log = list(log)
        log.clear()
        steps = {}
        q = runner_kw.get("mtp_k", 0) + 1
        for name, bs, prefill in (("decode", 3, False), ("prefill", 2, True)):
            ids = torch.arange(bs * q) % 16
            lens = torch.full((bs,), 2)
            kw = {"is_prefill": True, "query_lens": torch.full((bs,), q)} if prefill else {}
            try:
                runner.execute(ids, ids.clone(), lens, **kw)
            except Exception as exc:  # kept as what the step did: the tests that read it fail naming it
                log.append(f"the step raised {type(exc).__name__}: {exc}")
            steps[name] = (list(log), getattr(atom.step_report(runner), "path", None) if not atom.missing("step_report") else None)
            log.clear()
    return {"returned": returned, "log": capture_log, "progress": progress.getvalue(), "steps": steps, "runner": runner, "model": model}


@pytest.fixture(scope="module")
def probed(atom):
    """Capture with the probe model at level 0 (nothing compiles): TR_HYBRID on rank 0 of a DP
    group of two, FULL, FULL_AND_TR_HYBRID, TR_HYBRID on rank 1, and TR_HYBRID with two draft tokens."""
    missing = atom.missing("ModelRunner", "eager_region", "token_graph", "get_forward_context", "token_graph_of")
    if missing:
        pytest.skip(f"the ATOM capability has no {', '.join(missing)}")
    return {
        "TR_HYBRID": _capture(atom, "TR_HYBRID", dp_size=2),
        "FULL": _capture(atom, "FULL"),
        "FULL_AND_TR_HYBRID": _capture(atom, "FULL_AND_TR_HYBRID"),
        "rank1": _capture(atom, "TR_HYBRID", rank=1, dp_size=2),
        "mtp": _capture(atom, "TR_HYBRID", mtp_k=2),
    }


def _sizes_in_capture_order(log: list) -> list[int]:
    order: list[int] = []
    for entry in log:
        if not order or order[-1] != entry[2]:
            order.append(entry[2])
    return order


@pytest.mark.parametrize("mode", ["TR_HYBRID", "FULL"])
@pytest.mark.spec("004.capture.largest-first")
def test_capture_records_the_largest_batch_first(probed, mode):
    assert _sizes_in_capture_order(probed[mode]["log"]) == [4, 2, 1], "batch sizes in the order the capture ran them"


@pytest.mark.spec("004.capture.ascending-return", "004.capture.return-shape")
def test_capture_returns_the_elapsed_time_and_the_sizes_ascending(probed):
    returned = probed["TR_HYBRID"]["returned"]
    assert isinstance(returned, tuple) and len(returned) == 2, f"capture_cudagraph() returned {returned!r}"
    elapsed, sizes = returned
    assert isinstance(elapsed, float) and elapsed >= 0.0, f"elapsed time {elapsed!r}"
    assert sizes == SIZES, "capture sizes returned"


@pytest.mark.spec("004.capture.progress-rank-0")
def test_capture_reports_progress_on_rank_0_only(probed):
    text = probed["TR_HYBRID"]["progress"]
    assert text.strip(), "rank 0 reported no capture progress"
    assert probed["rank1"]["progress"] == "", "rank 1 reported capture progress"
    assert probed["rank1"]["returned"][1] == SIZES, "rank 1 captured other sizes"


@pytest.mark.parametrize("mode", ["TR_HYBRID", "FULL"])
@pytest.mark.spec("004.capture.warmup-before-record")
def test_every_bucket_runs_a_warmup_forward_before_its_recording(probed, mode):
    per_size: dict[int, list] = {}
    for tr_graph, _, bs, *_ in probed[mode]["log"]:
        per_size.setdefault(bs, []).append(tr_graph)
    want = "record" if mode == "TR_HYBRID" else None
    assert per_size == {bs: [None, want] for bs in (4, 2, 1)}, "batch size -> tr_graph of each forward (warm-up, then recording)"


@pytest.mark.spec("004.context.record-mode", "004.context.replay-mode", "004.capture.inference-mode")
def test_capture_records_with_tr_graph_record_and_a_replayed_step_sees_replay(probed):
    seen = probed["TR_HYBRID"]
    assert [e[0] for e in seen["log"] if e[0] is not None] == ["record"] * 3, "tr_graph of the recording passes"
    decode_log, path = seen["steps"]["decode"]
    assert [e[0] for e in decode_log] == ["replay"], f"tr_graph seen by the eager region of a replayed decode ({path})"
    prefill_log, _ = seen["steps"]["prefill"]
    assert [e[0] for e in prefill_log] == [None], "an eager prefill ran with a tr_graph"


@pytest.mark.spec("004.capture.max-q-len")
def test_capture_lays_out_draft_tokens_plus_one_query_rows(probed):
    got = {(bs, rows, q) for _, rows, bs, _, q, *_ in probed["mtp"]["log"]}
    assert got == {(bs, bs * 3, 3) for bs in (4, 2, 1)}, "(running_bs, rows, max_seqlen_q) captured with mtp_k=2"
    assert {(bs, q) for _, _, bs, _, q, *_ in probed["TR_HYBRID"]["log"]} == {(bs, 1) for bs in (4, 2, 1)}


@pytest.mark.spec("004.context.running-tokens")
def test_running_tokens_counts_rows_and_running_bs_requests(probed):
    got = {(bs, tokens) for _, _, bs, _, _, _, tokens in probed["mtp"]["log"]}
    assert got == {(bs, bs * 3) for bs in (4, 2, 1)}, "(running_bs, running_tokens) captured with mtp_k=2 (3 rows a request)"


@pytest.mark.spec("004.modes.token-bucket-rows", "004.tokengraph.without-compile")
def test_a_token_bucket_is_counted_in_rows(atom, probed):
    # bs * q rows per bucket, recorded by a @token_graph unit that no torch.compile touches
    graph = atom.token_graph_of(probed["mtp"]["model"].model)
    assert graph.captured_sizes("decode") == [3, 6, 12], "token buckets recorded with mtp_k=2 (3 rows a request)"


@pytest.mark.spec("004.capture.symmetric-dp")
def test_every_dp_rank_is_told_the_same_count_at_capture(probed):
    for key in ("TR_HYBRID", "rank1"):
        counts = {bs: dp for _, _, bs, _, _, dp, _ in probed[key]["log"]}
        assert counts == {bs: [bs, bs] for bs in (4, 2, 1)}, f"{key}: batch size -> num_tokens_across_dp at capture"


@pytest.mark.spec("004.modes.full-and-tr-hybrid")
def test_full_and_tr_hybrid_records_token_graphs_as_tr_hybrid_does(atom, probed):
    seen = probed["FULL_AND_TR_HYBRID"]
    assert [e[0] for e in seen["log"]] == [None, "record"] * 3, "FULL_AND_TR_HYBRID did not record token graphs"
    graph = atom.token_graph_of(seen["model"].model)
    assert graph.captured_sizes("decode") == SIZES
    decode_log, path = seen["steps"]["decode"]
    assert [e[0] for e in decode_log] == ["replay"], f"a decode did not replay a token graph ({path})"
    assert path in (None, "token_graph"), f"a decode under FULL_AND_TR_HYBRID took the {path} path"
    assert list(seen["runner"].req_graph.recordings()) == [], "FULL_AND_TR_HYBRID also captured full decode graphs"


@pytest.mark.spec("004.modes.full-whole-model")
def test_full_replays_the_whole_forward_with_the_recorded_context(probed):
    # Under FULL the eager region is recorded inline: a replay runs no Python (a device graph) or
    # runs it with the capture's context (the CPU recorder), never with the live step's 3 requests.
    decode_log, path = probed["FULL"]["steps"]["decode"]
    assert path in (None, "req_graph"), f"a FULL decode of 3 requests took the {path} path"
    assert [e for e in decode_log if e[0] == "replay" or e[2] != 4] == [], "the eager region ran live inside a FULL replay"


# --- level 3: what only a compile writes (slow) ---------------------------------------------------


def _register_probe_split(atom):
    """A splitting op that logs the address of its first input (a graph input at level 3)."""
    pointers: list[int] = []

    def statements_probe_split(x: torch.Tensor, out: torch.Tensor) -> None:
        pointers.append(x.data_ptr())
        out.copy_(x + 1)

    def fake(x: torch.Tensor, out: torch.Tensor) -> None:
        return None

    key = ("probe_split", atom.direct_register_custom_op)
    known = _PROBE_OPS.get(key)
    if known is None:
        name = atom.direct_register_custom_op("statements_probe_split", statements_probe_split, mutates_args=["out"], fake_impl=fake,
                                              dispatch_key="CompositeExplicitAutograd")
        known = _PROBE_OPS[key] = (name, pointers)
    return known


_PROBE_OPS: dict = {}


def _split_model(atom, **cc):
    """A model at level 3 that splits at :func:`_register_probe_split`'s op, applied to its input;
    its pieces compiled by the implementation's own compiler unless ``use_inductor=True``."""
    name, pointers = _register_probe_split(atom)
    cc.setdefault("use_inductor", False)
    config = atom.Config(max_num_seqs=8, compilation_config=atom.CompilationConfig(
        level=3, cudagraph_capture_sizes=[1, 2, 4], splitting_ops=[name], **cc))
    namespace, op_name = name.split(".")
    op = getattr(getattr(torch.ops, namespace), op_name)

    class SplitAtInput(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            gen = torch.Generator().manual_seed(3)
            self.lin = nn.Linear(M.HIDDEN, M.HIDDEN)
            for p in self.parameters():
                p.data = torch.randn(p.shape, generator=gen) * 0.3

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = torch.zeros_like(x)
            op(x, out)
            return self.lin(out)

    return atom.support_torch_compile(SplitAtInput)(atom_config=config), pointers


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def level3(atom, tmp_path_factory):
    """Two level-3 compiles of a model that splits at its input, with the implementation's own piece
    compiler and the default cache root (``HOME`` pointed at a temporary folder): one with
    ``compile_sizes=["cudagraph_capture_sizes"]`` (capture sizes 1, 2, 4) whose first call is at
    size 4 and with a debug dump, one with ``cudagraph_copy_inputs``."""
    home = tmp_path_factory.mktemp("atom_statements_home")
    seen: dict = {"home": home}
    with pytest.MonkeyPatch.context() as mp, torch.no_grad():
        mp.setenv("HOME", str(home))
        torch._dynamo.reset()
        model, _ = _split_model(atom, compile_sizes=["cudagraph_capture_sizes"], debug_dump_path=str(home / "dump"))
        start = atom.COUNTERS.snapshot()
        x = M.inputs(4)
        seen["first"] = (model(x) - M.eager_reference(model, x)).abs().max().item()
        seen["after_first"] = atom.COUNTERS.delta(start).as_dict()
        mark = atom.COUNTERS.snapshot()
        model(M.inputs(4, seed=1))
        seen["after_second"] = atom.COUNTERS.delta(mark).as_dict()
        seen["files_plain"] = _files(home)

        torch._dynamo.reset()
        model, pointers = _split_model(atom, cudagraph_copy_inputs=True, cudagraph_mode=atom.CUDAGraphMode.FULL)
        del pointers[:]
        inputs = [M.inputs(3, seed=s) for s in (5, 6)]
        outs = [model(x) for x in inputs]
        seen["copy_pointers"] = list(pointers)  # before the eager reference runs the op on the caller's tensors
        seen["copy_errors"] = [(o - M.eager_reference(model, x)).abs().max().item() for o, x in zip(outs, inputs)]
        seen["caller_pointers"] = [x.data_ptr() for x in inputs]
        seen["files_both"] = _files(home)
    return seen


@pytest.mark.slow
@pytest.mark.spec("004.piecewise.general-shape-first", "004.piecewise.compile-sizes-once", "004.config.compile-sizes-alias")
def test_the_first_call_runs_the_general_shape_even_at_a_compile_size(level3):
    first, second = level3["after_first"], level3["after_second"]
    assert first["num_specialized_compilations"] == 0, "the first call (size 4, in compile_sizes) compiled for its size"
    assert first["num_backend_compilations"] >= 1, "the first call compiled no general-shape piece"
    assert second["num_specialized_compilations"] == first["num_backend_compilations"], "the second call at size 4 did not specialize every piece"
    assert level3["first"] <= 1e-4


@pytest.mark.slow
@pytest.mark.spec("004.config.cache-dir-default", "004.cache.rank-dir", "004.cache.file", "004.backend.computation-graph")
def test_an_empty_cache_dir_means_the_home_cache_folder_per_rank(level3):
    files = [f for f in level3["files_plain"] if f.startswith(".cache") and f.endswith(("vllm_compile_cache.py", "computation_graph.py"))]
    parts = [Path(f).parts for f in files]
    assert parts and all(p[:4] == (".cache", "atom", "torch_compile_cache", parts[0][3]) and p[4] == "rank_0" for p in parts), (
        f"not under ~/.cache/atom/torch_compile_cache/<hash>/rank_0/: {files}")
    assert {p[-1] for p in parts} == {"vllm_compile_cache.py", "computation_graph.py"}, files


@pytest.mark.slow
@pytest.mark.spec("004.config.debug-dump-rank-0", "004.config.debug-dump-contents")
def test_debug_dump_path_receives_the_graphs_under_rank_0(level3):
    dumped = [Path(f).parts for f in level3["files_plain"] if f.startswith("dump")]
    assert dumped, "nothing was dumped to debug_dump_path"
    names = " ".join(p[-1] for p in dumped)
    assert "traced_graph" in names and "decompiled" in names, f"the dump holds no traced graph or no decompiled code: {names}"
    assert {p[1] for p in dumped} == {"rank_0"}, f"dump files not under <debug_dump_path>/rank_0/: {sorted(map('/'.join, dumped))}"


@pytest.mark.slow
@pytest.mark.spec("004.backend.cache-dir-hash")
def test_another_configuration_compiles_into_another_hash_folder(level3):
    hashes = {Path(f).parts[3] for f in level3["files_both"] if f.startswith(".cache") and f.endswith("vllm_compile_cache.py")}
    assert len(hashes) == 2, f"two configurations, cache folders {sorted(hashes)}"


@pytest.mark.slow
@pytest.mark.spec("004.backend.copy-inputs")
def test_copy_inputs_hands_the_graph_one_static_buffer(level3):
    pointers, callers = level3["copy_pointers"], level3["caller_pointers"]
    assert len(pointers) == 2 and max(level3["copy_errors"]) <= 1e-4, level3["copy_errors"]
    assert pointers[0] == pointers[1], "the split op saw two addresses: the inputs were not copied into one static buffer"
    assert not set(pointers) & set(callers), "the split op read the caller's tensor"


@pytest.mark.slow
@pytest.mark.spec("004.backend.copy-inputs-needs-a-mode")
def test_copy_inputs_under_mode_none_reads_the_callers_tensor(atom, level3, tmp_path):
    with torch.no_grad():
        torch._dynamo.reset()
        model, pointers = _split_model(atom, cudagraph_copy_inputs=True, cudagraph_mode=atom.CUDAGraphMode.NONE, cache_dir=str(tmp_path))
        del pointers[:]
        x = M.inputs(3, seed=7)
        model(x)
    assert pointers == [x.data_ptr()], "cudagraph_copy_inputs copied the input under cudagraph_mode NONE"


@pytest.fixture(scope="module")
def inductor_auto(atom, tmp_path_factory):
    """A level-3 compile with Inductor and no piece compiler named: the cache map's backend names."""
    root = tmp_path_factory.mktemp("atom_statements_inductor")
    with torch.no_grad():
        torch._dynamo.reset()
        model, _ = _split_model(atom, use_inductor=True, cache_dir=str(root))
        x = M.inputs(3)
        error = (model(x) - M.eager_reference(model, x)).abs().max().item()
    maps = sorted(root.rglob("vllm_compile_cache.py"))
    keys = []
    if maps:
        import ast

        data = ast.literal_eval(maps[0].read_text())
        keys = list(data.get("entries", data) if isinstance(data, dict) else data)
    return {"error": error, "keys": keys}


@pytest.mark.slow
@pytest.mark.spec("004.compiler.standalone-adaptor")
def test_inductor_pieces_go_through_the_standalone_adaptor_on_torch_2_8_and_later(inductor_auto):
    version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    want = "inductor_standalone" if version >= (2, 8) else "inductor"
    names = sorted({k[2] for k in inductor_auto["keys"] if isinstance(k, tuple) and len(k) == 3})
    assert names == [want], f"torch {torch.__version__}: the cache map's backend names are {names}, not the {want} adaptor's"
    assert inductor_auto["error"] <= 1e-4
