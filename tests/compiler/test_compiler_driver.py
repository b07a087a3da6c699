"""The compiler driver: neuronx-cc-style argument parsing, the IREE mapping, and failures."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reference.compiler.driver import (
    CompilerConfig,
    CompilerDriver,
    parse_compiler_args,
)
from reference.core.errors import CompilerArgumentError, NEFFCompilationError


@pytest.mark.parametrize("spelling", [["-O3"], ["--optlevel", "3"], ["--optlevel=3"], ["--optlevel 3"], "-O3"])
def test_every_spelling_of_a_level_means_the_same(spelling):
    assert parse_compiler_args(spelling) == [("-O", "3")]
    assert CompilerConfig.from_args(spelling).optlevel == 3


@pytest.mark.spec("000.precedence.compiler-default-o1")
def test_defaults_are_O1_and_trn2():
    config = CompilerConfig.from_args([])
    assert (config.optlevel, config.target) == (1, "trn2")
    assert "--iree-opt-level=O1" in config.iree_args()


def test_the_last_occurrence_of_a_flag_wins():
    assert CompilerConfig.from_args(["-O3", "--target", "trn3", "-O2"]).optlevel == 2


def test_level_and_autocast_map_onto_iree_flags():
    args = CompilerConfig.from_args(["-O3", "--auto-cast", "matmult", "--auto-cast-type", "bf16"]).iree_args()
    assert "--iree-opt-level=O3" in args
    assert "--iree-global-opt-demote-contraction-inputs-operations=matmul" in args
    assert "--iree-global-opt-demote-contraction-inputs-type=bf16" in args


@pytest.mark.parametrize(
    "args, flag, words",
    [
        (["--no-such-flag"], "--no-such-flag", "unknown compiler flag"),
        (["-O7"], "-O7", "unknown optimization level"),
        (["--optlevel", "9"], "--optlevel", "not accepted"),
        (["--target", "trn9"], "--target", "not accepted"),
        (["--lnc"], "--lnc", "expects a value"),
        (["--target", "--lnc", "2"], "--target", "expects a value"),
        (["trn2"], "trn2", "no flag before it"),
    ],
)
def test_bad_arguments_raise_a_typed_error_naming_the_flag(args, flag, words):
    with pytest.raises(CompilerArgumentError) as info:
        parse_compiler_args(args)
    assert isinstance(info.value, NEFFCompilationError)
    assert info.value.flag == flag
    assert flag in str(info.value) and words in str(info.value)


def test_a_non_string_argument_is_rejected():
    with pytest.raises(CompilerArgumentError, match="must be strings"):
        parse_compiler_args(["-O2", 3])


_VALID_PIECES = st.sampled_from(
    [["-O1"], ["-O2"], ["-O3"], ["--optlevel", "2"], ["--optlevel=3"], ["--target", "trn2"], ["--target=trn3"],
     ["--lnc", "2"], ["--logical-nc-config=1"], ["--model-type", "transformer"], ["--auto-cast", "all"],
     ["--enable-mixed-precision-accumulation"], ["--internal-hlo2tensorizer-options=--a --b"]]
)


@given(st.lists(_VALID_PIECES, max_size=8))
def test_the_recorded_tokens_parse_back_to_the_same_configuration(pieces):
    """An artifact's metadata records a config's tokens, and a staged graph compiles later from
    the recorded list: parsed again, it must be the same configuration (the same key)."""
    config = CompilerConfig.from_args([t for piece in pieces for t in piece])
    again = CompilerConfig.from_args(list(config.args))
    assert again == config and again.pairs == tuple(parse_compiler_args(list(config.args)))


def test_each_level_gives_the_compiler_a_different_pipeline():
    pipelines = {n: tuple(CompilerConfig.from_args([f"-O{n}"]).iree_args()) for n in (1, 2, 3)}
    assert len(set(pipelines.values())) == 3, pipelines
    assert "--iree-llvmcpu-loop-unrolling" in pipelines[3] and "--iree-llvmcpu-loop-unrolling" not in pipelines[2]


def test_the_artifact_comes_back_on_standard_output():
    cmd = CompilerDriver("iree-compile").command_line(CompilerConfig.from_args([]))
    assert cmd[1] == "-" and cmd[-2:] == ["-o", "-"]


def test_compiler_failure_carries_its_output_and_command_line():
    broken = "func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> { %0 = stablehlo.not_an_op %a return %0 }"
    with pytest.raises(NEFFCompilationError) as info:
        CompilerDriver().compile(broken, CompilerConfig.from_args(["-O2"]), graph_name="broken_graph")
    err = info.value
    assert err.graph_name == "broken_graph"
    assert "error" in err.compiler_log.lower()
    assert err.command and "iree-compile" in err.command[0] and "--iree-opt-level=O2" in err.command
    assert "broken_graph" in str(err) and "command line" in str(err)


def test_a_valid_module_compiles_to_a_loadable_artifact():
    from reference.runtime import LoadedArtifact
    import torch

    text = "func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> { %0 = stablehlo.add %a, %a : tensor<4xf32>\n return %0 : tensor<4xf32> }"
    result = CompilerDriver().compile(text, CompilerConfig.from_args(["-O3"]))
    assert result.artifact[:2] == b"PK" and b"module.fb" in result.artifact[:128]  # IREE VM archive
    out = LoadedArtifact(result.artifact, graph_name="double")(torch.arange(4, dtype=torch.float32))
    assert out[0].tolist() == [0.0, 2.0, 4.0, 6.0]


def test_a_one_thread_compile_builds_the_same_artifact():
    """``parallel_compile`` workers compile on one thread when they fill the cores; that may not
    change the artifact, since the flag is not in the cache key."""
    text = (
        "func.func @main(%a: tensor<8x8xf32>, %b: tensor<8x8xf32>) -> tensor<8x8xf32> {\n"
        "  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>\n"
        "  %1 = stablehlo.add %0, %a : tensor<8x8xf32>\n  return %1 : tensor<8x8xf32>\n}"
    )
    threaded = CompilerDriver().compile(text, CompilerConfig.from_args(["-O2"]))
    single = CompilerDriver().compile(text, CompilerConfig.from_args(["-O2"]).on_one_thread())
    assert "--mlir-disable-threading" in single.command and "--mlir-disable-threading" not in threaded.command
    assert single.artifact == threaded.artifact
