"""The helper API, the metric table, the debug directory and the device placement, one module at a
time (no compiler runs here except where a test says so)."""

from __future__ import annotations

import csv
import logging
import os
import sys

import pytest
import torch

import reference
from reference.backends import api
from reference.core import env
from reference.backends.debug_artifacts import DebugArtifacts
from reference.backends.device import is_device_tensor, place, to_device
from reference.core.errors import CompilerStackMissingError, EnvVarError, UnsupportedInputError
from reference.core.metrics import NeuronCompilationMetrics


@pytest.fixture(autouse=True)
def _default_name():
    reference.set_model_name("model_default")
    yield
    reference.set_model_name("model_default")


@pytest.mark.spec("001.helper.set-model-name")
def test_model_name_default_and_set():
    assert reference.get_model_name() == "model_default"
    reference.set_model_name("llama_8b")
    assert reference.get_model_name() == "llama_8b"


@pytest.mark.parametrize("name", ["../x", "a/b", "..", "/etc/passwd", "a/../../b", ".hidden", "x\\y"])
def test_model_names_cannot_escape_a_directory(name, tmp_path):
    reference.set_model_name(name)
    cleaned = reference.get_model_name()
    assert "/" not in cleaned and "\\" not in cleaned and ".." not in cleaned and not cleaned.startswith(".")
    target = (tmp_path / cleaned).resolve()
    assert target.parent == tmp_path.resolve()


def test_model_name_must_be_a_string():
    with pytest.raises(TypeError, match="str"):
        reference.set_model_name(3)


def test_get_rank_outside_distributed_is_zero():
    assert reference.get_rank() == 0


@pytest.mark.spec("001.env.compile-only-helper")
def test_compile_only_sets_the_variable_for_the_block(monkeypatch):
    monkeypatch.delenv(env.COMPILE_ONLY, raising=False)
    with reference.compile_only():
        assert env.get(env.COMPILE_ONLY) is True
    assert env.COMPILE_ONLY not in os.environ


def test_unknown_metric_table_names_the_variable(monkeypatch):
    monkeypatch.setenv(env.ENABLED_METRIC_TABLES, "graph_stats,op_stats")
    with pytest.raises(EnvVarError, match=r"TORCH_NEURONX_ENABLED_METRIC_TABLES.*graph_stats"):
        api.enabled_metric_tables()


def _record(name="m_0_inference_0"):
    return NeuronCompilationMetrics(
        graph_id="k" * 32, graph_name=name, model_name="m", has_collectives=False, graph_node_count=5,
        timestamp="2026-01-01T00:00:00+00:00", torch_neuronx_fx_passes_us=1, torch_neuronx_lower_us=2, _compile_us=3,
    )


def test_graph_stats_rows_go_to_a_directory_created_on_demand(monkeypatch, tmp_path):
    target = tmp_path / "metrics" / "nested"
    monkeypatch.setenv(env.ENABLED_METRIC_TABLES, "graph_stats")
    monkeypatch.setenv(env.METRICS_DIR, str(target))
    api._write_graph_stats(_record("a"))
    api._write_graph_stats(_record("b"))
    rows = list(csv.DictReader(open(target / "graph_stats.csv")))
    assert [r["graph_name"] for r in rows] == ["a", "b"]
    assert list(rows[0]) == list(api.GRAPH_STATS_COLUMNS)
    assert rows[0]["torch_neuronx_compile_us"] == "3"


def test_graph_stats_is_off_unless_enabled(monkeypatch, tmp_path):
    monkeypatch.delenv(env.ENABLED_METRIC_TABLES, raising=False)
    monkeypatch.setenv(env.METRICS_DIR, str(tmp_path))
    api._write_graph_stats(_record())
    assert not (tmp_path / "graph_stats.csv").exists()


def test_an_unwritable_metrics_directory_warns_and_never_raises(monkeypatch, tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(env.ENABLED_METRIC_TABLES, "graph_stats")
    monkeypatch.setenv(env.METRICS_DIR, str(blocker / "sub"))
    with caplog.at_level(logging.WARNING):
        api._write_graph_stats(_record())
    assert "TORCH_NEURONX_METRICS_DIR" in caplog.text


def test_debug_artifacts_are_written_and_removed_unless_preserved(monkeypatch, tmp_path):
    monkeypatch.setenv(env.DEBUG_DIR, str(tmp_path))
    d = DebugArtifacts()
    folder = d.write("m_0_inference_0", fx_code="graph", hlo="module {}", artifact=b"\0bin")
    assert sorted(os.listdir(folder)) == ["artifact.vmfb", "fx_graph.py", "stablehlo.mlir"]
    monkeypatch.setenv(env.PRESERVE_COMPILATION_ARTIFACTS, "1")
    d.cleanup()
    assert os.path.isdir(folder)
    monkeypatch.setenv(env.PRESERVE_COMPILATION_ARTIFACTS, "0")
    d.cleanup()
    assert not os.path.exists(folder) and os.path.isdir(tmp_path)


def test_an_unwritable_debug_directory_names_the_variable(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv(env.DEBUG_DIR, str(blocker / "debug"))
    with pytest.raises(EnvVarError, match="TORCH_NEURONX_DEBUG_DIR"):
        DebugArtifacts().directory()


def test_a_graph_name_cannot_leave_the_debug_directory(monkeypatch, tmp_path):
    monkeypatch.setenv(env.DEBUG_DIR, str(tmp_path / "d"))
    with pytest.raises(ValueError, match="leave the debug directory"):
        DebugArtifacts().write("../outside", fx_code="", hlo=None, artifact=None)


def test_device_tensors_and_host_tensors(monkeypatch):
    x = torch.randn(3)
    assert not is_device_tensor(x)
    d = to_device(x)
    assert is_device_tensor(d) and torch.equal(d, x) and d.data_ptr() != x.data_ptr()


def test_placement_rules(monkeypatch):
    # A stand-in for a compiled graph: returns a fresh tensor, as the runtime does.
    run = place(lambda a: (a * 2,), [0], graph_name="g")
    x = torch.randn(3)
    monkeypatch.delenv(env.DISABLE_CPU_AUTOCOPY, raising=False)
    monkeypatch.delenv(env.RETAIN_DEVICE_MODE, raising=False)
    assert is_device_tensor(run(x)[0])
    monkeypatch.setenv(env.RETAIN_DEVICE_MODE, "1")
    assert not is_device_tensor(run(x)[0])
    assert is_device_tensor(run(to_device(x))[0])
    monkeypatch.setenv(env.DISABLE_CPU_AUTOCOPY, "yes")
    with pytest.raises(UnsupportedInputError, match=r"graph 'g'.*argument 0.*TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY"):
        run(x)
    assert torch.equal(run(to_device(x))[0], x * 2)


def test_a_bad_setting_fails_before_anything_is_compiled(monkeypatch, tmp_path):
    """Real pipeline: the preflight stops the compile with the variable's name; the cache stays empty."""
    cache = tmp_path / "neff"
    monkeypatch.setenv(env.NEFF_CACHE_DIR, str(cache))
    monkeypatch.setenv(env.RETAIN_DEVICE_MODE, "sometimes")
    torch._dynamo.reset()
    with pytest.raises(EnvVarError, match="TORCH_NEURONX_RETAIN_DEVICE_MODE"):
        torch.compile(lambda x: x + 1, backend="neuron")(torch.randn(2))
    assert not cache.exists() or not any(cache.iterdir())


@pytest.mark.parametrize("absent, dist", [("torch_mlir", "torch-mlir"), ("iree.runtime", "iree-base-runtime")])
def test_a_backend_without_the_compiler_stack_names_the_extra_to_install(monkeypatch, tmp_path, absent, dist):
    """The suite installed alone still registers the neuron* names: using one says which extra to
    install, before anything is traced or cached, and never falls back to eager."""
    cache = tmp_path / "neff"
    monkeypatch.setenv(env.NEFF_CACHE_DIR, str(cache))
    monkeypatch.delenv(env.DISABLE_FALLBACK_EXECUTION, raising=False)  # the default: failures fall back
    monkeypatch.setitem(sys.modules, absent, None)  # what find_spec sees where it is not installed
    torch._dynamo.reset()
    with pytest.raises(CompilerStackMissingError, match=rf"lacks {dist}: install the 'reference' extra") as err:
        torch.compile(lambda x: x + 1, backend="neuron")(torch.randn(2))
    assert "neuron-conformance[reference]" in str(err.value) and err.value.missing == [dist]
    assert not cache.exists() or not any(cache.iterdir())
