"""Bad input to the pipeline: typed errors that name the op or graph, and a clean cache afterwards."""

from __future__ import annotations

import os
import stat

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from reference.core.errors import (
    BackendOptionError,
    CompilerArgumentError,
    LoweringError,
    NEFFCompilationError,
    NEFFExecutionError,
    UnsupportedInputError,
)
from reference.lowering.stablehlo import lower_to_stablehlo
from reference.runtime import LoadedArtifact


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "neff"
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(d))
    monkeypatch.setenv("TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR", str(tmp_path / "local"))
    return d


def _entries(d) -> list[str]:
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def test_an_op_with_no_lowering_is_named():
    gm = make_fx(lambda x: torch.histc(x, bins=4), tracing_mode="fake")(torch.randn(8))
    with pytest.raises(LoweringError) as info:
        lower_to_stablehlo(gm, graph_name="hist_graph")
    assert info.value.ops == ["torch.aten.histc"]
    assert "hist_graph" in str(info.value) and "torch.aten.histc" in str(info.value)


def test_a_dtype_the_compiler_does_not_take_names_the_input():
    gm = make_fx(lambda x: x * 2, tracing_mode="fake")(torch.randn(4, dtype=torch.complex64))
    with pytest.raises(UnsupportedInputError, match=r"complex64.*compiler does not take"):
        lower_to_stablehlo(gm, graph_name="complex_graph")


def test_a_non_tensor_input_is_refused():
    gm = make_fx(lambda x, n: x.reshape(n, -1), tracing_mode="symbolic")(torch.randn(4, 2), 4)
    with pytest.raises(UnsupportedInputError, match="symbolic shape|not a tensor"):
        lower_to_stablehlo(gm, graph_name="sym_graph")


def test_a_model_dynamo_cannot_trace_raises_dynamos_typed_error(cache_dir):
    def data_dependent(x):
        if x.sum().item() > 0:  # a Python branch on a device value
            return x + 1
        return x - 1

    with pytest.raises(torch._dynamo.exc.TorchDynamoException, match="data-dependent|Data-dependent"):
        torch.compile(data_dependent, backend="neuron", fullgraph=True)(torch.randn(4))
    assert _entries(cache_dir) == []


def test_an_unknown_compiler_flag_fails_before_anything_is_written(cache_dir):
    with pytest.raises(CompilerArgumentError, match="--bogus"):
        torch.compile(lambda x: x + 1, backend="neuron", options={"compiler_args": ["--bogus"]})(torch.randn(3))
    assert _entries(cache_dir) == []


def test_options_must_be_a_dict(cache_dir):
    with pytest.raises(BackendOptionError, match="options must be a dict"):
        torch.compile(lambda x: x + 1, backend="neuron", options=[("compiler_args", [])])(torch.randn(3))


def test_a_compiler_crash_leaves_no_entry(cache_dir, tmp_path, monkeypatch):
    """Fakes the compiler binary (a neighbour) with a script that writes half an output and fails."""
    fake = tmp_path / "fake-iree-compile"
    # the driver asks for the output on stdout (-o -): half an artifact goes there before the failure
    fake.write_text('#!/bin/sh\nfor a; do case "$prev" in -o) if [ "$a" = - ]; then printf partial; else printf partial > "$a"; fi;; esac; prev=$a; done\n'
                    'echo "fake failure" >&2\nexit 3\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr("reference.compiler.driver._iree_compile_path", lambda: str(fake))
    with pytest.raises(NEFFCompilationError) as info:
        torch.compile(lambda x: x * 3, backend="neuron")(torch.randn(3))
    assert "fake failure" in info.value.compiler_log and "status 3" in str(info.value)
    leftovers = [e for e in _entries(cache_dir) if not e.startswith(".locks")]
    assert not any(os.path.isfile(os.path.join(cache_dir, e, "model.neff")) for e in leftovers)
    assert not any(e.startswith(".tmp") for e in leftovers)


def test_a_corrupt_artifact_fails_to_load_naming_the_graph():
    with pytest.raises(NEFFExecutionError, match="graph 'g_bad'"):
        LoadedArtifact(b"PK\x03\x04 not really an archive", graph_name="g_bad")


def test_a_wrong_number_of_inputs_names_the_graph():
    from reference.compiler.driver import CompilerConfig, CompilerDriver
    from reference.core.specs import TensorSpec

    text = "func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> { return %a : tensor<4xf32> }"
    loaded = LoadedArtifact(
        CompilerDriver().compile(text, CompilerConfig.from_args([])).artifact, graph_name="g_id", input_specs=[TensorSpec("float32", (4,), (1,))]
    )
    with pytest.raises(NEFFExecutionError, match="graph 'g_id': expected 1 inputs, got 2"):
        loaded(torch.zeros(4), torch.zeros(4))
