"""Unit tests of the forked-child runner, the staged-graph reader, the compile hook and the native
key guard. The compile hook test stages a hand-written entry and stops before compiling."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from reference.backends.capture import read_staged, stage_graph
from reference.compiler.driver import CompilerConfig
from reference.core.build_settings import BuildSettings
from reference.pipeline import BuildContext
from reference.flows.forked import run_forked
from reference.core.specs import TensorSpec
from reference.lowering.stablehlo import LoweredGraph
from reference.backends.native import CompilerArgsConflictError, _assert_cache_key_args, reset_native_key_registry
from reference.flows.staged_build import parallel_compile, resolve_staged_args
from reference.flows.tracing import TraceJobError, validate_jobs


def test_run_forked_reports_values_errors_crashes_and_timeouts_in_order():
    def boom():
        raise KeyError("missing thing")

    tasks = [
        ("value", lambda: os.getpid()),
        ("error", boom),
        ("crash", lambda: os._exit(5)),
        ("hang", lambda: time.sleep(600)),
    ]
    done = []
    out = run_forked(tasks, workers=2, timeout=5, on_done=lambda i, o: done.append(i))
    assert [o.identity for o in out] == ["value", "error", "crash", "hang"]
    assert out[0].ok and out[0].value != os.getpid()  # it ran in another process
    assert not out[1].ok and out[1].error_type == "KeyError" and "missing thing" in out[1].error
    assert not out[2].ok and out[2].exitcode == 5 and "died" in out[2].describe()
    assert not out[3].ok and out[3].timed_out
    assert sorted(done) == [0, 1, 2, 3]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return not any(line.startswith("State:") and "Z" in line for line in fh)
    except FileNotFoundError:
        return False


def test_run_forked_kills_a_hanging_grandchild(tmp_path):
    import subprocess

    pid_file = tmp_path / "grandchild.pid"

    def spawn():
        p = subprocess.Popen(["sleep", "600"])
        pid_file.write_text(str(p.pid))
        time.sleep(600)

    (out,) = run_forked([("spawner", spawn)], workers=1, timeout=3)
    assert out.timed_out
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid), "the compiler-like grandchild outlived the timeout"


def test_validate_jobs_names_the_job():
    assert len(validate_jobs([(print, {}), (print, {}, None), (print, {}, ["-O2"])])) == 3
    for bad, match in [((print,), "job 0"), ((1, {}), "not callable"), ((print, [], None), "kwargs"), ((print, {}, "-O3"), "list of strings")]:
        with pytest.raises(TraceJobError, match=match):
            validate_jobs([bad])


def _ctx(graph_name: str, compiler_args) -> BuildContext:
    """A build of ``graph_name`` under ``compiler_args`` (parsed here, as a public edge would) and
    the settings the environment gives now."""
    return BuildContext(graph_name, CompilerConfig.from_args(compiler_args), BuildSettings.from_env())


def _lowered() -> LoweredGraph:
    spec = TensorSpec("float32", (2,), (1,))
    hlo = "module {\n  func.func @main(%arg0: tensor<2xf32>) -> tensor<2xf32> {\n    return %arg0 : tensor<2xf32>\n  }\n}\n"
    return LoweredGraph(hlo, (spec,), (spec,), 1)


def test_staged_entries_round_trip_and_resolve_their_arguments(tmp_path):
    stage_graph(_lowered(), _ctx("g0", ["-O3", "--target", "trn2"]), directory=str(tmp_path))
    (entry,) = read_staged(tmp_path)
    assert entry.metadata.stage == "captured" and entry.lowered() == _lowered()
    assert resolve_staged_args(entry, ["-O1"]) == (["-O3", "--target", "trn2"], "recorded")
    entry.metadata.compiler_args = None
    assert resolve_staged_args(entry, ["-O2"]) == (["-O2", "--target", "trn2"], "base")


def test_staged_checks_see_entries_grouped_by_graph_before_compiling(tmp_path):
    stage_graph(_lowered(), _ctx("g0", ["-O3"]), directory=str(tmp_path))
    stage_graph(_lowered(), _ctx("g0", ["-O2"]), directory=str(tmp_path))
    seen = {}

    class Stop(Exception):
        pass

    def check(groups):
        seen.update({k: len(v) for k, v in groups.items()})
        raise Stop

    with pytest.raises(Stop):
        parallel_compile(tmp_path, workers=1, checks=[check])
    assert seen == {"g0": 2}


def test_native_guard_refuses_a_second_argument_set():
    reset_native_key_registry()
    _assert_cache_key_args("k1", CompilerConfig.from_args(["-O3", "--target", "trn2"]), graph_name="g")
    _assert_cache_key_args("k1", CompilerConfig.from_args(["-O3", "--target=trn2"]), graph_name="g")  # same flags, other spelling
    with pytest.raises(CompilerArgsConflictError, match="'g'.*k1"):
        _assert_cache_key_args("k1", CompilerConfig.from_args(["-O2", "--target", "trn2"]), graph_name="g")
    with pytest.raises(CompilerArgsConflictError, match="recorded"):
        _assert_cache_key_args("k2", CompilerConfig.from_args(["-O2"]), graph_name="g", recorded=["-O3"])
    reset_native_key_registry()


def test_parallel_compile_publishes_and_names_a_failing_graph(tmp_path, monkeypatch):
    from reference.flows.staged_build import ParallelCompileError
    from reference.core.build_settings import CacheRoots
    from reference.pipeline import neff_cache

    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "neff"))
    monkeypatch.setenv("TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR", str(tmp_path / "local"))
    staged = tmp_path / "staged"
    good = stage_graph(_lowered(), _ctx("good_graph", ["-O2", "--target", "trn2"]), directory=str(staged))
    bad = LoweredGraph("module { this is not mlir }\n", _lowered().input_specs, _lowered().output_specs, 1)
    stage_graph(bad, _ctx("broken_graph", ["-O2", "--target", "trn2"]), directory=str(staged))
    with pytest.raises(ParallelCompileError, match="broken_graph") as info:
        parallel_compile(staged, workers=2, progress=False)
    (ok,) = [g for g in info.value.report.graphs if g.ok]
    assert ok.graph_name == "good_graph" and ok.cache_key == good.key
    entry = neff_cache(CacheRoots.from_env()).get(good.key)
    assert entry is not None and entry.metadata.compiler_args == ["-O2", "--target", "trn2"]


def _isolated_caches(tmp_path, monkeypatch) -> None:
    for var, sub in (
        ("TORCH_NEURONX_NEFF_CACHE_DIR", "neff"),
        ("TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR", "local"),
        ("TORCH_NEURONX_HLO_CACHE_DIR", "hlo"),
    ):
        monkeypatch.setenv(var, str(tmp_path / sub))


@pytest.mark.spec("000.flow.native-two-element-jobs")
def test_native_trace_jobs_go_through_the_deferred_flow(tmp_path, monkeypatch):
    """Two-element (native) jobs are captured in forked children under the native seam's key and
    built by parallel_compile; the native seam then serves the graph from the cache (with a miss
    being an error), equal to eager. Compiles for real."""
    import torch

    from types import SimpleNamespace

    from neuron_fixtures.policy import PolicyVLM
    from reference.compiler.scope import scoped_compiler_args
    from reference.runner.opt_level import with_optimization_level
    from reference.runner import NeuronModelRunner, NeuronWorker

    _isolated_caches(tmp_path, monkeypatch)
    helpers = SimpleNamespace(scoped_compiler_args=scoped_compiler_args, with_optimization_level=with_optimization_level)
    runner = NeuronModelRunner(PolicyVLM(helpers), compiler_args=["--model-type", "transformer"], mode="native").load_model()
    report = NeuronWorker(runner).compile_deferred(tmp_path / "staged", [None], timeout=600)
    assert report.graphs and all(g.ok and not g.cache_hit for g in report.graphs), report.graphs
    (entry,) = read_staged(tmp_path / "staged")
    assert entry.metadata.extra["key_policy"] == "native"
    monkeypatch.setenv("NEURON_LIBTORCH_ASSERT_CACHE_HIT", "1")
    with torch.no_grad():
        served = runner.run_site(None, **runner.model.example_kwargs(None))
        expected = runner.model(**runner.model.example_kwargs(None))
    torch.testing.assert_close(served, expected, rtol=1e-4, atol=1e-5)


def test_a_failing_fx_pass_falls_back_to_eager_when_fallback_is_on(monkeypatch):
    """With TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0 a pass that raises is a compile failure like
    any other: a warning, and the graph runs eagerly; with the default it raises. The failing pass
    is a stand-in added to a private pass manager (no compiler runs)."""
    import torch

    from reference.backends import compile_entry
    from reference.fx_passes import FXPass, FXPassManager

    class Broken(FXPass):
        @property
        def name(self) -> str:
            return "BrokenPass"

        def run(self, gm, **kwargs):
            raise RuntimeError("this pass always fails")

    manager = FXPassManager().add_pass(Broken())
    monkeypatch.setattr(compile_entry, "get_default_pass_manager", lambda: manager)
    x = torch.randn(3, 4)

    def f(x):
        return torch.relu(x) * 2

    torch._dynamo.reset()
    with pytest.raises(Exception, match="BrokenPass"):
        torch.compile(f, backend="neuron")(x)
    torch._dynamo.reset()
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "0")
    with pytest.warns(UserWarning, match="compilation failed, running the graph eagerly.*BrokenPass"):
        out = torch.compile(f, backend="neuron")(x)
    torch.testing.assert_close(out, f(x))
    torch._dynamo.reset()


def test_an_entry_staged_by_an_older_reference_is_refused_with_what_to_do(tmp_path):
    from reference.core.schema import MetadataError

    staged = stage_graph(_lowered(), _ctx("g0", ["-O3"]), directory=str(tmp_path))
    (Path(staged.path) / "program.json").write_text("{}")  # what entries kept before lowering.json
    with pytest.raises(MetadataError, match=r"staged by an older reference \(program.json.*capture the graph again"):
        read_staged(tmp_path)


@pytest.mark.spec("000.flow.parallel-compile-reads-cache-dir")
def test_a_staging_directory_that_is_missing_or_a_file_is_a_typed_error_naming_it(tmp_path):
    from reference import FlowDirectoryError
    from reference.backends.capture import capture_to
    from reference.flows.tracing import parallel_trace

    missing, a_file = tmp_path / "captured-typo", tmp_path / "a-file"
    a_file.write_text("")
    for where, words in ((missing, "does not exist"), (a_file, "is not a directory")):
        with pytest.raises(FlowDirectoryError, match=rf"parallel_compile.*{where}.*{words}.*give the directory"):
            parallel_compile(where, workers=1, progress=False)
    assert not missing.exists()
    with pytest.raises(FlowDirectoryError, match=rf"parallel_trace.*{a_file}.*is not a directory"):
        parallel_trace([(torch.nn.Identity(), {"input": torch.ones(1)}, None)], cache_dir=a_file, workers=1)
    with pytest.raises(FlowDirectoryError, match=rf"capture_to.*{a_file}.*is not a directory"):
        with capture_to(a_file):
            pass
    parallel_compile(tmp_path, workers=1, progress=False)  # an existing directory with nothing staged is no error


def test_build_only_builds_each_graph_without_running_it():
    """``flows.tools.build_only`` (the SPMD benchmark's build step): one key per graph of a model
    with a graph break, its lowering and build times, and the same keys from a second call."""
    from reference.flows.tools import build_only

    def model(x):
        y = torch.tanh(x) * 3
        torch._dynamo.graph_break()
        return y.sum(dim=0) + 1

    args = (torch.randn(4, 5),)
    stats: dict = {}
    torch._dynamo.reset()
    keys = build_only(model, args, stats=stats)
    assert len(keys) == 2 and len(set(keys.values())) == 2, keys
    assert all(len(k) >= 32 for k in keys.values()), keys
    assert stats["lower_s"] > 0 and stats["build_s"] > 0, stats
    torch._dynamo.reset()
    again = build_only(model, args)
    assert sorted(again.values()) == sorted(keys.values())  # the same graphs (named anew: the process's count goes on)
