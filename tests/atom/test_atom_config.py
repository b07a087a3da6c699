"""Unit tests of the ATOM configuration: graph modes, levels, fields, level-3 resolution, presets."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from reference.atom import (
    PRESETS,
    CompilationConfig,
    CompilationLevel,
    Config,
    ConfigError,
    CUDAGraphMode,
    default_capture_sizes,
    preset,
)

M = CUDAGraphMode


@pytest.mark.parametrize(
    "mode, value, decode, mixed, separate, full, tr_hybrid, highest",
    [
        (M.NONE, 0, M.NONE, M.NONE, False, False, False, M.NONE),
        (M.TR_HYBRID, 1, M.TR_HYBRID, M.TR_HYBRID, False, False, True, M.TR_HYBRID),
        (M.FULL, 2, M.FULL, M.FULL, False, True, False, M.FULL),
        (M.FULL_DECODE_ONLY, (2, 0), M.FULL, M.NONE, True, True, False, M.FULL),
        (M.FULL_AND_TR_HYBRID, (2, 1), M.FULL, M.TR_HYBRID, True, True, True, M.FULL),
    ],
)
@pytest.mark.spec("004.modes.helpers", "004.modes.full-decode-only")
def test_graph_mode_helpers_follow_the_table(mode, value, decode, mixed, separate, full, tr_hybrid, highest):
    assert mode.value == value
    assert mode.decode_mode() is decode
    assert mode.mixed_mode() is mixed
    assert mode.separate_routine() is separate
    assert mode.has_full_cudagraphs() is full
    assert mode.uses_tr_hybrid() is tr_hybrid
    assert mode.max_cudagraph_mode() is highest


@pytest.mark.parametrize("given_value, expected", [("full", M.FULL), ("FULL_DECODE_ONLY", M.FULL_DECODE_ONLY), (1, M.TR_HYBRID), ([2, 1], M.FULL_AND_TR_HYBRID), (M.NONE, M.NONE)])
@pytest.mark.spec("004.modes.values")
def test_graph_mode_parse_accepts_names_values_and_members(given_value, expected):
    assert M.parse(given_value) is expected


@pytest.mark.parametrize("bad", ["piecewise", 7, True, (1, 1), None])
def test_graph_mode_parse_lists_the_choices(bad):
    with pytest.raises(ValueError, match="FULL_AND_TR_HYBRID"):
        M.parse(bad)


@pytest.mark.spec("004.levels.names")
def test_levels_have_the_seed_names():
    assert [(level.name, int(level)) for level in CompilationLevel] == [
        ("NO_COMPILATION", 0), ("DYNAMO_AS_IS", 1), ("DYNAMO_ONCE", 2), ("PIECEWISE", 3),
    ]


@pytest.mark.spec("004.config.defaults")
def test_every_field_of_the_table_has_its_default():
    defaults = {f.name: (f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default) for f in dataclasses.fields(CompilationConfig)}
    assert defaults == {
        "level": 0, "use_cudagraph": True, "cudagraph_capture_sizes": None, "cuda_graph_sizes": [512],
        "cudagraph_mode": None, "splitting_ops": None, "cudagraph_copy_inputs": False, "use_inductor": True,
        "compile_sizes": None, "inductor_compile_config": {}, "debug_dump_path": "", "cache_dir": "",
        "custom_op_namespace": "atom", "piece_compiler": "", "static_forward_context": {},
    }
    config = Config()
    assert (config.enforce_eager, config.capture_sizes) == (False, None)
    # Below level 3 an unset mode resolves to NONE: nothing is recorded.
    assert config.compilation_config == dataclasses.replace(CompilationConfig(), cudagraph_mode=M.NONE)


@pytest.mark.spec("004.levels.level-3-post-init", "004.levels.level-3-splitting-ops", "004.levels.level-3-tr-hybrid-default")
def test_level_3_resolves_ops_sizes_mode_and_compile_sizes_in_order():
    config = Config(compilation_config=CompilationConfig(level=3, compile_sizes=["cudagraph_capture_sizes", 1000]), max_num_seqs=1024)
    cc = config.compilation_config
    assert cc.splitting_ops == ["atom.unified_attention_with_output", "atom.mla_attention"]
    assert config.capture_sizes == [1, 2, 3, 4, 5, 6, 7, 8] + list(range(16, 513, 16))
    assert cc.cudagraph_mode is M.TR_HYBRID
    assert cc.resolved_compile_sizes == sorted(set(config.capture_sizes) | {1000})


@pytest.mark.spec("004.capture.sizes-explicit-or-ladder")
def test_explicit_capture_sizes_override_and_are_sorted():
    config = Config(compilation_config=CompilationConfig(level=3, cudagraph_capture_sizes=[8, 1, 4], cuda_graph_sizes=[64]))
    assert config.capture_sizes == [1, 4, 8]


@pytest.mark.spec("004.capture.several-sizes-as-given")
def test_several_cuda_graph_sizes_are_used_as_given():
    assert Config(compilation_config=CompilationConfig(level=3, cuda_graph_sizes=[3, 1, 24])).capture_sizes == [1, 3, 24]


@pytest.mark.spec("004.levels.level-3-tr-hybrid-default", "004.replay.enforce-eager")
def test_a_chosen_mode_is_kept_and_enforce_eager_turns_graphs_off():
    assert Config(compilation_config=CompilationConfig(level=3, cudagraph_mode="FULL")).compilation_config.cudagraph_mode is M.FULL
    assert Config(enforce_eager=True, compilation_config=CompilationConfig(level=3)).compilation_config.cudagraph_mode is M.NONE


@given(st.integers(min_value=1, max_value=4096))
@pytest.mark.spec("004.capture.default-ladder")
def test_the_generated_ladder(largest):
    sizes = default_capture_sizes(largest)
    assert sizes[:8] == list(range(1, 9))
    assert all(s % 16 == 0 for s in sizes[8:])
    assert sizes == sorted(set(sizes))
    assert not sizes[8:] or sizes[-1] <= largest < sizes[-1] + 16


@given(st.lists(st.integers(max_value=64), min_size=1, max_size=6))
def test_non_positive_or_repeated_sizes_are_rejected_naming_the_field(sizes):
    assume(min(sizes) <= 0 or len(set(sizes)) != len(sizes))
    for name in ("cudagraph_capture_sizes", "cuda_graph_sizes", "compile_sizes"):
        with pytest.raises(ConfigError) as info:
            CompilationConfig(**{name: sizes})
        assert info.value.field == name


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"level": 5}, "level"), ({"level": -1}, "level"), ({"level": True}, "level"),
        ({"compile_sizes": [4, "capture_sizes"]}, "compile_sizes"), ({"compile_sizes": [2.0]}, "compile_sizes"),
        ({"splitting_ops": ["atom.not_registered_anywhere"]}, "splitting_ops"), ({"splitting_ops": "aten.mm"}, "splitting_ops"),
        ({"cudagraph_mode": "PIECEWISE"}, "cudagraph_mode"), ({"piece_compiler": "tvm"}, "piece_compiler"),
        ({"inductor_compile_config": ["max_autotune"]}, "inductor_compile_config"), ({"cuda_graph_sizes": []}, "cuda_graph_sizes"),
    ],
)
def test_bad_fields_raise_a_typed_error_naming_the_field(kwargs, field):
    with pytest.raises(ConfigError) as info:
        CompilationConfig(**kwargs)
    assert info.value.field == field
    assert str(info.value).startswith(field)


@pytest.mark.spec("004.customop.splitting-op")
def test_a_registered_op_is_a_valid_splitting_op():
    assert CompilationConfig(splitting_ops=["aten.mm"]).splitting_ops == ["aten.mm"]


@pytest.mark.spec("004.capture.max-num-seqs")
def test_capture_sizes_above_max_num_seqs_name_the_source_field():
    with pytest.raises(ConfigError) as info:
        Config(max_num_seqs=16, compilation_config=CompilationConfig(level=3, cuda_graph_sizes=[32]))
    assert info.value.field == "cuda_graph_sizes" and "max_num_seqs=16" in str(info.value)


EXPECTED_PRESETS = {
    "debug": (0, M.NONE), "compatibility_check": (1, M.NONE), "inductor_only": (2, M.NONE),
    "production": (3, M.TR_HYBRID), "small_model_full": (3, M.FULL), "pd_decode": (3, M.FULL_DECODE_ONLY),
}


@pytest.mark.parametrize("name", PRESETS)
@pytest.mark.spec("004.decision.presets")
def test_presets_are_the_decision_tree_leaves(name):
    level, mode = EXPECTED_PRESETS[name]
    config = Config(compilation_config=preset(name, cudagraph_capture_sizes=[1, 2]))
    assert config.compilation_config.level == level
    assert config.compilation_config.cudagraph_mode is mode


@pytest.mark.spec("004.decision.presets")
def test_presets_are_fresh_and_unknown_ones_are_errors():
    assert preset("production") is not preset("production")
    assert set(PRESETS) == set(EXPECTED_PRESETS)
    with pytest.raises(ConfigError, match="preset"):
        preset("fastest")


@pytest.mark.spec("004.backend.cache-dir-hash")
def test_the_hash_follows_what_is_compiled_not_where_output_goes():
    base = CompilationConfig(level=3)
    assert base.compute_hash() == CompilationConfig(level=3, cache_dir="/elsewhere", debug_dump_path="/d").compute_hash()
    assert base.compute_hash() != CompilationConfig(level=3, compile_sizes=[4]).compute_hash()
    assert base.compute_hash() != CompilationConfig(level=3, piece_compiler="reference").compute_hash()
