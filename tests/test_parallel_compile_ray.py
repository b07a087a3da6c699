"""parallel_compile's executors: the local fork server (the default) and Ray.

The Ray tests start a real two-node Ray cluster on this machine once for the module (`ray start`:
a head and a worker node, one CPU and a temporary folder each) and stop it after; parallel_compile
uses the Ray this process is connected to as it is. They compile for real, all in the slow lane
(starting the cluster and the two builds cost make test about 28 s of its 2 cores): the same
entries as the local path, one task per key, the faults, the cluster lost mid-run (a cluster of
its own) and the runner's flow. The executor choice and the lazy import need no Ray and run in
make test.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys
import time

import pytest
import torch

from reference.backends.capture import stage_graph
from reference.core.errors import EnvVarError
from reference.core.specs import TensorSpec
from reference.flows.staged_build import ExecutorChoiceError, ParallelCompileError, parallel_compile
from reference.lowering.stablehlo import LoweredGraph
from reference.compiler.driver import CompilerConfig
from reference.core.build_settings import BuildSettings, CacheRoots
from reference.pipeline import BuildContext, neff_cache
from reference.runtime import LoadedArtifact

needs_ray = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None,
    reason="ray is not installed (the project's cluster extra: pip install -e '.[cluster]')",
)
ARGS = ["-O2", "--target", "trn2"]
SPEC = TensorSpec("float32", (4,), (1,))


def _ctx(graph_name: str, compiler_args) -> BuildContext:
    """A build of ``graph_name`` under ``compiler_args`` (parsed here, as a public edge would) and
    the settings the environment gives now."""
    return BuildContext(graph_name, CompilerConfig.from_args(compiler_args), BuildSettings.from_env())


def _adds(k: float) -> LoweredGraph:
    """x + k: one small distinct graph per k."""
    hlo = (
        "module {\n  func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
        f"    %c = stablehlo.constant dense<{k:.1f}> : tensor<4xf32>\n"
        "    %0 = stablehlo.add %arg0, %c : tensor<4xf32>\n"
        "    return %0 : tensor<4xf32>\n  }\n}\n"
    )
    return LoweredGraph(hlo, (SPEC,), (SPEC,), 2)


def _stage(directory, n: int) -> dict[str, float]:
    """n distinct graphs staged under directory; their keys and constants."""
    return {stage_graph(_adds(float(k)), _ctx(f"add_{k}", ARGS), directory=str(directory)).key: float(k) for k in range(n)}


def _caches(monkeypatch, root) -> None:
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(root / "neff"))
    monkeypatch.setenv("TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR", str(root / "local"))
    monkeypatch.setenv("TORCH_NEURONX_HLO_CACHE_DIR", str(root / "hlo"))


# --- the choice, without Ray --------------------------------------------------------------------------


def test_a_bad_executor_is_a_typed_error_naming_the_variable_or_the_argument(tmp_path, monkeypatch):
    _stage(tmp_path / "staged", 1)
    monkeypatch.setenv("NEURON_PARALLEL_COMPILE_EXECUTOR", "dask")
    with pytest.raises(EnvVarError, match="NEURON_PARALLEL_COMPILE_EXECUTOR='dask'.*local, ray"):
        parallel_compile(tmp_path / "staged", progress=False)
    monkeypatch.delenv("NEURON_PARALLEL_COMPILE_EXECUTOR")
    with pytest.raises(ExecutorChoiceError, match="executor='dask'.*'local', 'ray'.*NEURON_PARALLEL_COMPILE_EXECUTOR"):
        parallel_compile(tmp_path / "staged", progress=False, executor="dask")
    assert not (tmp_path / "neff").exists()  # refused before anything compiled


def test_importing_the_flows_does_not_import_ray():
    code = "import sys, reference.flows, reference.flows.staged_build; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"


# --- a real local Ray ---------------------------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_node(args: list[str], log) -> subprocess.Popen:
    """`ray start ... --block` in a session of its own: the node's processes are one process group,
    stopped together without touching any other Ray on the machine."""
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    return subprocess.Popen([ray_cli, "start", "--block", "--disable-usage-stats", *args], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def _stop(node: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(node.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    node.wait(timeout=30)


def _node_dir() -> str:
    """A temporary folder of a node's own, short: Ray's socket paths under it must fit in 107 bytes."""
    import tempfile

    return tempfile.mkdtemp(prefix="rt-", dir="/tmp")


def _wait_for_port(port: int, head: subprocess.Popen, log_path, timeout: float = 60.0) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert head.poll() is None, open(log_path).read()[-3000:]
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    pytest.fail(f"the Ray head did not listen on {port} within {timeout:g} s:\n{open(log_path).read()[-3000:]}")


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    """A real two-node Ray cluster on this machine, started once for the module: a head and a worker
    node, one CPU each, each node with a temporary folder of its own and each started with `ray
    start` in its own process group; this process connects to it as a driver. Tasks land on
    both nodes' worker processes, as the scheduler places them."""
    import shutil

    import ray

    log_path = tmp_path_factory.mktemp("ray") / "nodes.log"
    log = open(log_path, "w")
    port = _free_port()
    saved = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"  # a throwaway cluster on the loopback
    dirs = [_node_dir(), _node_dir()]
    nodes = [_ray_node(["--head", f"--port={port}", "--num-cpus=1", "--include-dashboard=false",
                        f"--temp-dir={dirs[0]}", "--node-ip-address=127.0.0.1"], log)]
    try:
        _wait_for_port(port, nodes[0], log_path)
        nodes.append(_ray_node([f"--address=127.0.0.1:{port}", "--num-cpus=1", f"--temp-dir={dirs[1]}",
                                "--node-ip-address=127.0.0.1"], log))
        ray.init(address=f"127.0.0.1:{port}", log_to_driver=False, logging_level="WARNING")
        deadline = time.monotonic() + 60
        while len([n for n in ray.nodes() if n["Alive"]]) < 2:
            assert time.monotonic() < deadline, f"the worker node did not join:\n{open(log_path).read()[-3000:]}"
            time.sleep(0.2)
        # the workers cannot import this test module: its prologues travel by value
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        yield ray
    finally:
        if ray.is_initialized():
            ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
            ray.shutdown()
        for node in reversed(nodes):
            _stop(node)
        log.close()
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
        if saved is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = saved


@needs_ray
@pytest.mark.slow
def test_ray_builds_what_the_local_path_builds_and_a_second_run_is_all_hits(tmp_path, monkeypatch, local_ray):
    """The same staged set through the fork server and through Ray, into two caches: the same keys
    and the same artifact bytes; Ray's entries are signed under the HMAC key, load and run equal to
    eager; a second Ray run is all cache hits. Progress is shown per graph as on the local path.
    (Not marked slow: make test keeps this one and the next, a local Ray of one node, about 20 s.)"""
    monkeypatch.setenv("TORCH_NEURONX_CACHE_HMAC_KEY", "a secret of the caller's")
    constants = _stage(tmp_path / "staged", 3)
    _caches(monkeypatch, tmp_path / "local_run")
    local = parallel_compile(tmp_path / "staged", workers=2, progress=False, executor="local")
    local_cache = neff_cache(CacheRoots.from_env())
    _caches(monkeypatch, tmp_path / "ray_run")
    seen = []
    report = parallel_compile(
        tmp_path / "staged", workers=2, executor="ray", progress=lambda done, total, rec, s: seen.append((done, total, rec.ok)),
    )
    assert sorted(seen) == [(1, 3, True), (2, 3, True), (3, 3, True)]
    assert {g.cache_key for g in report.graphs} == {g.cache_key for g in local.graphs} == set(constants)
    assert all(g.ok and not g.cache_hit and g.compile_us > 0 for g in report.graphs), report.graphs
    ray_cache = neff_cache(CacheRoots.from_env())
    x = torch.arange(4, dtype=torch.float32)
    for key, k in constants.items():
        entry = ray_cache.get(key)  # authenticated: a missing or wrong HMAC would be a miss
        assert entry is not None and os.path.isfile(os.path.join(ray_cache.entry_dir(key), "entry.hmac"))
        assert entry.artifact == local_cache.get(key).artifact
        assert entry.metadata.compiler_args == ARGS
        (out,) = LoadedArtifact(entry.artifact, graph_name=f"add_{k:.0f}", input_specs=(SPEC,), output_specs=(SPEC,))(x)
        torch.testing.assert_close(out, x + k)
    again = parallel_compile(tmp_path / "staged", workers=2, executor="ray", progress=False)
    assert all(g.ok and g.cache_hit for g in again.graphs), again.graphs


def _note_task(folder: str, graph_name: str) -> None:
    """A worker's prologue: leaves one file per task it runs, named by the graph and the node the
    scheduler placed it on."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    with open(os.path.join(folder, f"{graph_name}-{node}-{os.getpid()}-{time.monotonic_ns()}"), "x"):
        pass


@needs_ray
@pytest.mark.slow
def test_a_graph_staged_twice_is_one_task_on_the_cluster(tmp_path, monkeypatch, local_ray):
    """Two sites that staged the same graph (same StableHLO, same arguments: one key) and a third
    graph: two Ray tasks, one per key, not three; the twice-staged key is one cache entry."""
    from reference.flows.ray_executor import RayExecutor

    _caches(monkeypatch, tmp_path)
    staged = tmp_path / "staged"
    first = stage_graph(_adds(7.0), _ctx("site_a", ARGS), directory=str(staged))
    again = stage_graph(_adds(7.0), _ctx("site_b", ARGS), directory=str(staged))
    other = stage_graph(_adds(8.0), _ctx("site_c", ARGS), directory=str(staged))
    assert first.key == again.key != other.key
    ran = tmp_path / "tasks"
    ran.mkdir()
    report = parallel_compile(staged, workers=2, executor=RayExecutor(prologue=functools.partial(_note_task, str(ran))),
                              progress=False)
    tasks = sorted(p.name.split("-")[0] for p in ran.iterdir())
    assert len(tasks) == 2 and "site_c" in tasks, tasks
    # two one-CPU tasks in flight at once on two one-CPU nodes: each node ran one
    nodes = {p.name.split("-")[1] for p in ran.iterdir()}
    assert len(nodes) == 2 and nodes <= {n["NodeID"] for n in local_ray.nodes()}, nodes
    assert sorted(g.cache_key for g in report.graphs) == sorted({first.key, other.key}), report.graphs
    assert all(g.ok and not g.cache_hit for g in report.graphs), report.graphs
    assert all(neff_cache(CacheRoots.from_env()).get(k) is not None for k in (first.key, other.key))


@needs_ray
@pytest.mark.slow
def test_a_graph_that_fails_on_ray_gets_its_failure_record_and_the_others_publish(tmp_path, monkeypatch, local_ray):
    _caches(monkeypatch, tmp_path)
    staged = tmp_path / "staged"
    good = stage_graph(_adds(1.0), _ctx("good_graph", ARGS), directory=str(staged))
    bad = LoweredGraph("module { this is not mlir }\n", (SPEC,), (SPEC,), 1)
    broken = stage_graph(bad, _ctx("broken_graph", ARGS), directory=str(staged))
    with pytest.raises(ParallelCompileError, match="(?s)1 of 2.*broken_graph") as info:
        parallel_compile(staged, workers=2, executor="ray", progress=False)
    (failed,) = info.value.report.failures
    assert failed.graph_name == "broken_graph" and "NEFFCompilationError" in failed.error
    cache = neff_cache(CacheRoots.from_env())
    assert cache.get(good.key) is not None and cache.get(broken.key) is None
    record = cache.failures.get(broken.key)
    assert record is not None and record["graph_name"] == "broken_graph" and record["attempts"] == 1


def _die(graph_name: str) -> None:
    os._exit(3)


def _die_once(marker: str, graph_name: str) -> None:
    """A worker's prologue: the first task to get here kills its own worker process."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, f"{graph_name} {os.getpid()}".encode())
    os.close(fd)
    os._exit(1)


@needs_ray
@pytest.mark.slow
def test_a_worker_that_dies_is_retried_and_the_run_finishes(tmp_path, monkeypatch, local_ray):
    from reference.flows.ray_executor import RayExecutor

    _caches(monkeypatch, tmp_path)
    constants = _stage(tmp_path / "staged", 2)
    marker = tmp_path / "died"
    executor = RayExecutor(max_retries=2, prologue=functools.partial(_die_once, str(marker)))
    report = parallel_compile(tmp_path / "staged", workers=2, executor=executor, progress=False)
    graph, pid = marker.read_text().split()
    assert int(pid) != os.getpid()  # a worker process died, not this one
    assert all(g.ok and not g.cache_hit for g in report.graphs), report.graphs
    assert {g.cache_key for g in report.graphs} == set(constants)
    assert all(neff_cache(CacheRoots.from_env()).get(key) is not None for key in constants)


@needs_ray
@pytest.mark.slow
def test_a_worker_that_always_dies_is_a_failure_record_after_its_retries(tmp_path, monkeypatch, local_ray):
    from reference.flows.ray_executor import RayExecutor

    _caches(monkeypatch, tmp_path)
    _stage(tmp_path / "staged", 1)
    executor = RayExecutor(max_retries=1, prologue=_die)
    with pytest.raises(ParallelCompileError, match=r"(?s)add_0.*WorkerCrashedError.*sent 2 time\(s\).*observed; max_retries=1.*attempt 2: WorkerCrashedError"):
        parallel_compile(tmp_path / "staged", workers=1, executor=executor, progress=False)


# --- a two-node cluster that goes away mid-run ---------------------------------------------------------

_DRIVER = r'''
import json, sys, time
from reference.flows.ray_executor import ClusterLostError, RayExecutor
from reference.flows.staged_build import parallel_compile

def slow(graph_name):  # each graph takes long enough for the cluster to go away half-way
    time.sleep(3)

try:
    parallel_compile(sys.argv[1], workers=1, executor=RayExecutor(prologue=slow, lost_after_s=5), progress=True)
    print(json.dumps({"raised": None}))
except ClusterLostError as exc:
    print(json.dumps({"raised": "ClusterLostError", "not_compiled": exc.not_compiled, "published": exc.published, "message": str(exc)}))
'''


@needs_ray
@pytest.mark.slow
def test_a_cluster_lost_mid_run_names_the_graphs_not_compiled_and_publishes_nothing_half(tmp_path, monkeypatch):
    """A head without CPUs and one worker node, started with `ray start` on this machine; the
    caller (another process, connected through RAY_ADDRESS) compiles four graphs one at a time; the
    worker node is killed after the first graph is published. The run ends with ClusterLostError
    naming exactly the graphs whose keys are not in the cache; every entry there is whole."""
    import time

    _caches(monkeypatch, tmp_path)
    constants = _stage(tmp_path / "staged", 4)
    port = _free_port()
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # a throwaway cluster on the loopback
    log = open(tmp_path / "ray.log", "w")
    import shutil

    ray_tmp, worker_tmp = _node_dir(), _node_dir()
    head = _ray_node(["--head", f"--port={port}", "--num-cpus=0", "--include-dashboard=false",
                      f"--temp-dir={ray_tmp}", "--node-ip-address=127.0.0.1"], log)
    worker = None
    try:
        _wait_for_port(port, head, tmp_path / "ray.log")
        worker = _ray_node([f"--address=127.0.0.1:{port}", "--num-cpus=1", f"--temp-dir={worker_tmp}",
                            "--node-ip-address=127.0.0.1"], log)
        monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
        driver = subprocess.Popen([sys.executable, "-c", _DRIVER, str(tmp_path / "staged")], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        cache = neff_cache(CacheRoots.from_env())
        deadline = time.monotonic() + 120
        while not any(cache.get(k) is not None for k in constants) and time.monotonic() < deadline and driver.poll() is None:
            time.sleep(0.2)
        assert any(cache.get(k) is not None for k in constants), open(tmp_path / "ray.log").read()[-3000:]
        _stop(worker)
        out, err = driver.communicate(timeout=180)
    finally:
        for node in (worker, head):
            if node is not None:
                _stop(node)
        log.close()
        shutil.rmtree(ray_tmp, ignore_errors=True)
        shutil.rmtree(worker_tmp, ignore_errors=True)
    result = __import__("json").loads(out.strip().splitlines()[-1])
    assert result["raised"] == "ClusterLostError", (out, err[-3000:])
    published = {k for k in constants if cache.get(k) is not None}
    assert 1 <= len(published) < 4 and result["published"] == len(published)
    missing = {f"graph 'add_{constants[k]:.0f}' (key {k})" for k in constants if k not in published}
    assert set(result["not_compiled"]) == missing
    assert all(name in result["message"] for name in missing) and "run parallel_compile again" in result["message"]
    assert not [p for p in os.listdir(cache.root) if p.startswith(".tmp-")]  # nothing half-published
    assert "parallel_compile [1/4]" in err  # the progress showed the graphs that did finish


@needs_ray
@pytest.mark.slow
def test_the_runners_deferred_flow_compiles_on_ray_and_serves_from_the_cache(tmp_path, monkeypatch, local_ray):
    """The capture flow's compile step on Ray: the runner's graphs traced in forked children, built
    as Ray tasks, then served by the native seam with a cache miss being an error, equal to eager."""
    from types import SimpleNamespace

    from neuron_fixtures.policy import PolicyVLM
    from reference.compiler.scope import scoped_compiler_args
    from reference.runner import NeuronModelRunner, NeuronWorker
    from reference.runner.opt_level import with_optimization_level

    _caches(monkeypatch, tmp_path)
    helpers = SimpleNamespace(scoped_compiler_args=scoped_compiler_args, with_optimization_level=with_optimization_level)
    runner = NeuronModelRunner(PolicyVLM(helpers), compiler_args=["--model-type", "transformer"], mode="native").load_model()
    report = NeuronWorker(runner).compile_deferred(tmp_path / "staged", [None], timeout=600, executor="ray")
    assert report.graphs and all(g.ok and not g.cache_hit for g in report.graphs), report.graphs
    monkeypatch.setenv("NEURON_LIBTORCH_ASSERT_CACHE_HIT", "1")
    with torch.no_grad():
        served = runner.run_site(None, **runner.model.example_kwargs(None))
        expected = runner.model(**runner.model.example_kwargs(None))
    torch.testing.assert_close(served, expected, rtol=1e-4, atol=1e-5)
