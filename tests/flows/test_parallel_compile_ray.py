"""parallel_compile's executors: the local fork server (the default) and Ray.

Most Ray tests start a real two-node Ray cluster on this machine once for the module (`ray start`:
a head and a worker node, one CPU and a temporary folder each) and stop it after; parallel_compile
uses the Ray this process is connected to as it is, and callers in processes of their own connect
to it by its address. The fault tests use real processes and real kills: a worker SIGKILLed while
iree-compile runs, a caller killed while it holds a claim, a worker node and the head node killed
(clusters of their own). All of them are in the slow lane: a cluster's start alone costs about
10 s of this machine's 2 cores, and the cheapest single-node test (the auto-started local Ray)
measured 25.4 s, 16.7 s and 12.2 s in three runs on a busy machine (load average 2-5 on 2 cores):
not reliably under the 20 s make test allows for one, with the default lane's margin about a minute. What runs in make test
needs no cluster: the executor choice, the lazy import, the outcome of each Ray exception (Ray's
exception objects constructed directly) and an address where nothing listens.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
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
# One pytest-xdist worker runs this module's tests one after another: the tests that kill a Ray
# worker or a node find their victim by its process (an iree-compile under a `ray::` worker, a
# node's process group), and a cluster another worker started beside them is not theirs to kill;
# the timing tests also assume the machine's cores are not another cluster's.
pytestmark = pytest.mark.xdist_group("ray")
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


# --- what each Ray failure means (Ray's exception objects built here, no cluster) -----------------------

# Ray raises these from ray.get on a task's result; here they are constructed directly, as Ray's own
# deserializer builds them (ray/_private/serialization.py), so that every kind is checked without
# provoking each fault. The faults themselves are exercised for real in the slow tests below.
_OOM = (
    "Task was killed due to the node running low on memory.\nMemory on the node (IP: 10.0.0.7, ID: 5f1e) where the "
    "task (task ID: 9c2a, name=_build_in_task, pid=4242, memory used=2.31GB) was running was 7.41GB / 7.70GB "
    "(0.962338), which exceeds the memory usage threshold of 0.95. Ray killed this worker (ID: 77ab) because it was "
    "the most recently scheduled task."
)


def _ray_failures():
    import ray.exceptions as rx

    missing = RuntimeError("The remote function failed to import on the worker.\n  ModuleNotFoundError: No module named 'reference'")
    return rx, [
        (rx.OutOfMemoryError(_OOM), "retry", "OutOfMemoryError", "node memory 7.41GB / 7.70GB (0.962338), the task used 2.31GB"),
        (rx.WorkerCrashedError(), "retry", "WorkerCrashedError", "worker process died"),
        (rx.NodeDiedError("The node 5f1e died."), "retry", "NodeDiedError", "sent again to a live node"),
        (rx.ObjectLostError("ab" * 14, None, ""), "retry", "ObjectLostError", "result was lost"),
        (rx.OwnerDiedError("ab" * 14, None, ""), "retry", "OwnerDiedError", "result was lost"),
        (rx.ObjectReconstructionFailedError("ab" * 14), "retry", "ObjectReconstructionFailedError", "result was lost"),
        (rx.ObjectFetchTimedOutError("ab" * 14, None, ""), "retry", "ObjectFetchTimedOutError", "result was lost"),
        (rx.RaySystemError("worker startup failed"), "retry", "RaySystemError", "worker startup failed"),
        (rx.TaskUnschedulableError("node 5f1e is dead"), "fail", "TaskUnschedulableError", "could not schedule the task: The task is not schedulable: node 5f1e is dead"),
        (rx.RuntimeEnvSetupError("pip failed"), "fail", "RuntimeEnvSetupError", "pip failed"),
        (rx.TaskCancelledError(), "fail", "TaskCancelledError", "cancelled by another party"),
        (rx.RayTaskError("_build_in_task", "Traceback ...", missing), "fail", "WorkerEnvironmentError", "module 'reference'"),
        (rx.LocalRayletDiedError(), "lost", "LocalRayletDiedError", "raylet) died"),
        (rx.RpcError("connection reset"), "lost", "RpcError", "connection reset"),
    ]


@needs_ray
def test_every_ray_failure_a_task_can_meet_has_an_outcome():
    """Each exception Ray can give for a task's result: retried (a system failure of the attempt),
    the graph's failure record (not retried: it would fail the same way) or the cluster lost. An OOM
    names the memory figure Ray measured."""
    from reference.flows.ray_executor import classify_failure

    rx, cases = _ray_failures()
    for exc, verdict, error_type, says in cases:
        got = classify_failure(exc, rx)
        assert got[:2] == (verdict, error_type) and says in got[2], (type(exc).__name__, got)


@needs_ray
def test_a_ray_address_where_nothing_listens_is_a_typed_error_naming_it_within_seconds(tmp_path, monkeypatch):
    """RAY_ADDRESS naming a port nobody listens on: ray.init alone retries for minutes; the run
    refuses within seconds with the address in the message, before anything compiles."""
    from reference.flows.ray_executor import ExecutorUnavailableError

    _caches(monkeypatch, tmp_path)
    _stage(tmp_path / "staged", 1)
    address = f"127.0.0.1:{_free_port()}"
    monkeypatch.setenv("RAY_ADDRESS", address)
    start = time.monotonic()
    with pytest.raises(ExecutorUnavailableError, match=f"no Ray cluster answers at '{address}'.*RAY_ADDRESS"):
        parallel_compile(tmp_path / "staged", workers=1, executor="ray", progress=False)
    assert time.monotonic() - start < 15
    assert not (tmp_path / "neff").exists()


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


@pytest.fixture
def ray_address(local_ray) -> str:
    """The address of the module's cluster, for callers in processes of their own."""
    return local_ray.get_runtime_context().gcs_address


@needs_ray
@pytest.mark.slow
def test_ray_builds_what_the_local_path_builds_and_a_second_run_is_all_hits(tmp_path, monkeypatch, local_ray):
    """The same staged set through the fork server and through Ray, into two caches: the same keys
    and the same artifact bytes; Ray's entries are signed under the HMAC key, load and run equal to
    eager; a second Ray run is all cache hits. Progress is shown per graph as on the local path.
    Each worker reports what it was given: no cache, no HMAC key, no store coordination."""
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
    # what each worker was given, as the worker itself saw it: no cache, no HMAC key, no store
    nodes = {n["NodeID"] for n in local_ray.nodes()}
    for g in report.graphs:
        assert g.worker["cache_enabled"] is False and g.worker["hmac_key"] is False, g.worker
        assert g.worker["store_compile"] is False and g.worker["attempts"] == 1 and g.worker["node"] in nodes, g.worker
        assert g.worker["pid"] != os.getpid()
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


# --- callers in processes of their own, on the module's cluster ------------------------------------------

_CALLER = r'''
import functools, json, os, sys, time
import ray
from reference.flows.ray_executor import RayExecutor
from reference.flows.staged_build import parallel_compile

staged, notes, ready, callers, sleep_s = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])

def note(folder, sleep_s, graph_name):  # a worker's prologue: one file per task that runs, then a while
    with open(os.path.join(folder, f"{graph_name}-{os.getpid()}-{time.monotonic_ns()}"), "x"):
        pass
    time.sleep(sleep_s)

ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False, logging_level="WARNING")
open(os.path.join(ready, str(os.getpid())), "w").close()
while len(os.listdir(ready)) < callers:  # every caller connected: they start together
    time.sleep(0.05)
report = parallel_compile(staged, workers=2, progress=False,
                          executor=RayExecutor(prologue=functools.partial(note, notes, sleep_s)))
print(json.dumps([[g.graph_name, g.cache_key, g.ok, g.cache_hit, g.waited, g.error] for g in report.graphs]), flush=True)
ray.shutdown()
'''


def _caller(tmp_path, ray_address, notes, ready, callers: int, sleep_s: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _CALLER, str(tmp_path / "staged"), str(notes), str(ready), str(callers), str(sleep_s)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, RAY_ADDRESS=ray_address),
    )


def _folders(tmp_path, *names):
    out = []
    for name in names:
        (tmp_path / name).mkdir()
        out.append(tmp_path / name)
    return out


@needs_ray
@pytest.mark.slow
def test_two_callers_over_the_same_graphs_compile_each_key_once_and_both_are_served(tmp_path, monkeypatch, ray_address):
    """Two parallel_compile runs in two processes, started together on one cluster over the same
    four staged graphs and one cache: four compile tasks in all (one per key); each caller has all
    four graphs; each key is compiled by one caller and served to the other, counted as a hit it
    waited for (or found), never as compiled twice."""
    _caches(monkeypatch, tmp_path)
    constants = _stage(tmp_path / "staged", 4)
    notes, ready = _folders(tmp_path, "notes", "ready")
    callers = [_caller(tmp_path, ray_address, notes, ready, 2, 2.0) for _ in range(2)]
    results = []
    for proc in callers:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        results.append(__import__("json").loads(out.strip().splitlines()[-1]))
    tasks = sorted(p.name.split("-")[0] for p in notes.iterdir())
    assert tasks == sorted(f"add_{k:.0f}" for k in constants.values()), tasks  # one compile per key
    for rows in results:
        assert sorted(r[1] for r in rows) == sorted(constants) and all(r[2] for r in rows), rows
    for key in constants:
        compiled = [r for rows in results for r in rows if r[1] == key and not r[3]]
        served = [r for rows in results for r in rows if r[1] == key and r[3]]
        assert len(compiled) == 1 and len(served) == 1, (key, results)
    assert any(r[4] for rows in results for r in rows), results  # started together: some key was waited for
    cache = neff_cache(CacheRoots.from_env())
    assert all(cache.get(k) is not None for k in constants)


@needs_ray
@pytest.mark.slow
def test_a_claim_left_by_a_killed_caller_is_taken_over(tmp_path, monkeypatch, ray_address):
    """Caller A claims the one staged key and its task runs long; caller B, started after, finds
    the key claimed and does not send it; A is killed (SIGKILL); B takes the claim over, compiles
    the graph and publishes it."""
    import signal

    _caches(monkeypatch, tmp_path)
    (key,) = _stage(tmp_path / "staged", 1)
    notes_a, notes_b, ready_a, ready_b = _folders(tmp_path, "notes_a", "notes_b", "ready_a", "ready_b")
    first = _caller(tmp_path, ray_address, notes_a, ready_a, 1, 120.0)
    try:
        deadline = time.monotonic() + 120
        while not list(notes_a.iterdir()):  # A's task runs: A holds the claim
            assert first.poll() is None and time.monotonic() < deadline, first.stderr.read()[-3000:] if first.poll() is not None else "A's task never started"
            time.sleep(0.2)
        second = _caller(tmp_path, ray_address, notes_b, ready_b, 1, 0.0)
        deadline = time.monotonic() + 120
        while not list(ready_b.iterdir()):
            assert second.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        time.sleep(4)
        assert not list(notes_b.iterdir())  # B saw the claim and sent nothing
        os.kill(first.pid, signal.SIGKILL)
        out, err = second.communicate(timeout=180)
    finally:
        if first.poll() is None:
            first.kill()
        first.wait()
    assert second.returncode == 0, err[-3000:]
    (row,) = __import__("json").loads(out.strip().splitlines()[-1])
    assert row[1] == key and row[2] and not row[3] and not row[4], row  # compiled by B, not served
    assert len(list(notes_b.iterdir())) == 1
    assert neff_cache(CacheRoots.from_env()).get(key) is not None


def _chain(k: float, layers: int) -> LoweredGraph:
    """A chain of 64x64 matmul + tanh layers: an iree-compile of a few seconds."""
    spec = TensorSpec("float32", (64, 64), (64, 1))
    lines = ["module {", "  func.func @main(%arg0: tensor<64x64xf32>) -> tensor<64x64xf32> {"]
    prev = "%arg0"
    for i in range(layers):
        lines.append(f"    %c{i} = stablehlo.constant dense<{k + i * 0.01:.3f}> : tensor<64x64xf32>")
        lines.append(f"    %d{i} = stablehlo.dot_general {prev}, %c{i}, contracting_dims = [1] x [0] : "
                     "(tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>")
        lines.append(f"    %t{i} = stablehlo.tanh %d{i} : tensor<64x64xf32>")
        prev = f"%t{i}"
    lines += [f"    return {prev} : tensor<64x64xf32>", "  }", "}", ""]
    return LoweredGraph("\n".join(lines), (spec,), (spec,), layers * 3)


def _kill_the_worker_of_a_running_compiler(killed: list, stop) -> None:
    """Find an iree-compile whose parent is a Ray worker (`ray::...`) and SIGKILL that worker."""
    import signal

    while not stop.is_set():
        table = subprocess.run(["ps", "-ww", "-eo", "pid=,ppid=,args="], capture_output=True, text=True).stdout.splitlines()
        rows = {int(r.split(None, 2)[0]): r.split(None, 2) for r in table if len(r.split(None, 2)) == 3}
        for pid, ppid, args in rows.values():
            parent = rows.get(int(ppid))
            if "iree-compile" in args.split(" ", 1)[0] and parent and parent[2].startswith("ray::"):
                os.kill(int(ppid), signal.SIGKILL)
                killed.append(int(ppid))
                return
        time.sleep(0.05)


@needs_ray
@pytest.mark.slow
def test_a_worker_killed_while_the_compiler_runs_is_sent_again_and_the_count_is_observed(tmp_path, monkeypatch, local_ray):
    """The Ray worker running a graph's build is SIGKILLed while its iree-compile runs (not in the
    task's prologue): the task is sent again, the graph compiles on a second attempt in another
    worker process, and the record says two attempts."""
    import threading

    _caches(monkeypatch, tmp_path)
    staged = tmp_path / "staged"
    entry = stage_graph(_chain(0.5, 40), _ctx("long_chain", ARGS), directory=str(staged))
    killed, stop = [], threading.Event()
    killer = threading.Thread(target=_kill_the_worker_of_a_running_compiler, args=(killed, stop), daemon=True)
    killer.start()
    try:
        report = parallel_compile(staged, workers=1, executor="ray", progress=False)
    finally:
        stop.set()
        killer.join(10)
    assert len(killed) == 1, "no iree-compile under a Ray worker was seen"
    (g,) = report.graphs
    assert g.ok and not g.cache_hit and g.cache_key == entry.key, g
    assert g.worker["attempts"] == 2 and g.worker["pid"] != killed[0], (g.worker, killed)
    assert neff_cache(CacheRoots.from_env()).get(entry.key) is not None


def _record_pid_then_sleep(folder: str, graph_name: str) -> None:
    """A worker's prologue: add_1 leaves its worker's pid and sleeps a minute (then a second file)."""
    if graph_name != "add_1":
        return
    with open(os.path.join(folder, "pid"), "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(60)
    open(os.path.join(folder, "finished"), "w").close()


@needs_ray
@pytest.mark.slow
def test_a_run_that_gives_up_cancels_its_running_tasks(tmp_path, monkeypatch, local_ray):
    """A progress callback that raises ends the run early: the task still running (add_1, asleep
    in its prologue) is cancelled: its worker process is gone within seconds, and it never ends."""
    from reference.flows.ray_executor import RayExecutor

    _caches(monkeypatch, tmp_path)
    _stage(tmp_path / "staged", 2)
    folder = tmp_path / "task"
    folder.mkdir()

    def stop(done, total, rec, wall_s):
        deadline = time.monotonic() + 60
        while not (folder / "pid").exists():  # add_1 is running
            assert time.monotonic() < deadline
            time.sleep(0.1)
        raise KeyboardInterrupt("the user stopped the run")

    executor = RayExecutor(prologue=functools.partial(_record_pid_then_sleep, str(folder)))
    with pytest.raises(KeyboardInterrupt):
        parallel_compile(tmp_path / "staged", workers=2, executor=executor, progress=stop)
    pid = int((folder / "pid").read_text())
    deadline = time.monotonic() + 20
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not os.path.exists(f"/proc/{pid}"), "the running task's worker was not cancelled"
    assert not (folder / "finished").exists()


def _hold(seconds: float, folder: str, name: str) -> None:
    """Other work on the cluster: holds a CPU for ``seconds``, saying in ``folder`` that it started."""
    open(os.path.join(folder, name), "w").close()
    time.sleep(seconds)


def _sleep(seconds: float, graph_name: str) -> None:
    """A worker's prologue: a build that takes ``seconds`` longer."""
    time.sleep(seconds)


@needs_ray
@pytest.mark.slow
def test_the_timeout_counts_from_a_tasks_start_not_from_its_submission(tmp_path, monkeypatch, local_ray):
    """Both CPUs of the cluster are held by other work for 9 s when the run sends its two tasks
    with a 6 s timeout: they wait for a CPU longer than the timeout, then compile in about a
    second each and succeed. A task that runs past the timeout once started is cancelled."""
    from reference.flows.ray_executor import RayExecutor

    _caches(monkeypatch, tmp_path)
    _stage(tmp_path / "staged", 2)
    hold = local_ray.remote(num_cpus=1)(_hold)
    started = tmp_path / "held"
    started.mkdir()
    held = [hold.remote(9, str(started), f"hold{i}") for i in range(2)]
    # Both holds running before the run sends its tasks (Ray's queues per function do not keep
    # the order of submission across functions, and a worker killed by an earlier test is restarted)
    deadline = time.monotonic() + 60
    while len(os.listdir(started)) < 2:
        assert time.monotonic() < deadline, "the holding tasks did not start"
        time.sleep(0.05)
    start = time.monotonic()
    report = parallel_compile(tmp_path / "staged", workers=2, executor="ray", progress=False, timeout=6)
    assert time.monotonic() - start > 6
    assert all(g.ok for g in report.graphs), report.graphs
    local_ray.get(held)
    stage_graph(_adds(99.0), _ctx("add_99", ARGS), directory=str(tmp_path / "staged_slow"))  # a key not in the cache
    slow = RayExecutor(prologue=functools.partial(_sleep, 30))
    with pytest.raises(ParallelCompileError, match="did not finish within its timeout"):
        parallel_compile(tmp_path / "staged_slow", workers=1, executor=slow, progress=False, timeout=3)


# --- clusters of their own: the head lost, the package missing, Ray started by the run ------------------

_LOST_HEAD_DRIVER = r'''
import json, os, sys, time
from reference.flows.ray_executor import ClusterLostError, RayExecutor
from reference.flows.staged_build import parallel_compile

def slow(graph_name):  # each graph takes long enough for the head to go away half-way
    time.sleep(3)

start = None
try:
    parallel_compile(sys.argv[1], workers=1, executor=RayExecutor(prologue=slow, lost_after_s=5), progress=True)
    print(json.dumps({"raised": None}), flush=True)
except ClusterLostError as exc:
    print(json.dumps({"raised": "ClusterLostError", "not_compiled": exc.not_compiled, "published": exc.published,
                      "message": str(exc), "at": time.time()}), flush=True)
os._exit(0)  # Ray's exit hooks may wait on the lost head
'''


def _own_cluster(tmp_path, head_cpus: int, worker_cpus: int | None, head_env: dict | None = None):
    """A head (and a worker node when ``worker_cpus``), each `ray start` in a process group of its
    own; returns (address, nodes, folders, log path)."""
    port = _free_port()
    log_path = tmp_path / "ray.log"
    log = open(log_path, "w")
    folders = [_node_dir()]
    env = dict(os.environ, RAY_AUTH_MODE="disabled", **(head_env or {}))
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    head = subprocess.Popen(
        [ray_cli, "start", "--block", "--disable-usage-stats", "--head", f"--port={port}", f"--num-cpus={head_cpus}",
         "--include-dashboard=false", f"--temp-dir={folders[0]}", "--node-ip-address=127.0.0.1"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env,
    )
    nodes = [head]
    _wait_for_port(port, head, log_path)
    if worker_cpus is not None:
        folders.append(_node_dir())
        nodes.append(_ray_node([f"--address=127.0.0.1:{port}", f"--num-cpus={worker_cpus}", f"--temp-dir={folders[1]}",
                                "--node-ip-address=127.0.0.1"], log))
    return f"127.0.0.1:{port}", nodes, folders, log_path, log


def _stop_cluster(nodes, folders, log) -> None:
    import shutil

    for node in reversed(nodes):
        if node is not None:
            _stop(node)
    log.close()
    for d in folders:
        shutil.rmtree(d, ignore_errors=True)


@needs_ray
@pytest.mark.slow
def test_the_head_node_killed_mid_run_is_cluster_lost_within_a_bounded_time(tmp_path, monkeypatch):
    """A head and a worker node (one CPU each); the caller (another process) compiles four graphs
    one at a time; the head node's processes are killed after the first graph is published. The
    caller is neither blocked nor killed by Ray: it raises ClusterLostError within a bounded time,
    naming exactly the graphs whose keys are not in the cache; every entry there is whole."""
    _caches(monkeypatch, tmp_path)
    constants = _stage(tmp_path / "staged", 4)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    address, nodes, folders, log_path, log = _own_cluster(tmp_path, 1, 1)
    try:
        monkeypatch.setenv("RAY_ADDRESS", address)
        driver = subprocess.Popen([sys.executable, "-c", _LOST_HEAD_DRIVER, str(tmp_path / "staged")],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        cache = neff_cache(CacheRoots.from_env())
        deadline = time.monotonic() + 120
        while not any(cache.get(k) is not None for k in constants) and time.monotonic() < deadline and driver.poll() is None:
            time.sleep(0.2)
        assert any(cache.get(k) is not None for k in constants), open(log_path).read()[-3000:]
        _stop(nodes[0])
        killed_at = time.time()
        out, err = driver.communicate(timeout=120)
    finally:
        _stop_cluster(nodes, folders, log)
    result = __import__("json").loads(out.strip().splitlines()[-1])
    assert result["raised"] == "ClusterLostError", (out, err[-3000:])
    assert result["at"] - killed_at < 40, result  # 5 s of grace, then cancelling and stopping, bounded
    assert re.search(rf"the head node at {re.escape(address)} \(GCS [^)]+\) has not answered for 5 s", result["message"]), result
    published = {k for k in constants if cache.get(k) is not None}
    assert 1 <= len(published) < 4 and result["published"] == len(published)
    missing = {f"graph 'add_{constants[k]:.0f}' (key {k})" for k in constants if k not in published}
    assert set(result["not_compiled"]) == missing
    assert not [p for p in os.listdir(cache.root) if p.startswith(".tmp-")]  # nothing half-published


_NO_PACKAGE = """
import sys

class NoProject:  # this node's Python cannot import the project's package
    def find_spec(self, name, path=None, target=None):
        if name == "reference" or name.startswith("reference."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoProject())
"""

_PLAIN_DRIVER = r'''
import json, os, sys, time
from reference.flows.staged_build import parallel_compile

start = time.monotonic()
try:
    parallel_compile(sys.argv[1], workers=1, executor="ray", progress=False)
    print(json.dumps({"raised": None}), flush=True)
except Exception as exc:
    print(json.dumps({"raised": type(exc).__name__, "message": str(exc), "module": getattr(exc, "module", None),
                      "s": time.monotonic() - start}), flush=True)
'''


@needs_ray
@pytest.mark.slow
def test_a_cluster_whose_workers_lack_the_package_is_a_typed_error_naming_the_module(tmp_path, monkeypatch):
    """A one-node cluster whose Python cannot import the project's package (a meta-path entry
    refuses it in every process the node starts): the run fails within seconds with
    WorkerEnvironmentError naming the module, before any graph is sent."""
    _caches(monkeypatch, tmp_path)
    _stage(tmp_path / "staged", 2)
    blocker = tmp_path / "site"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(_NO_PACKAGE)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    address, nodes, folders, log_path, log = _own_cluster(tmp_path, 1, None, head_env={"PYTHONPATH": str(blocker)})
    try:
        out = subprocess.run([sys.executable, "-c", _PLAIN_DRIVER, str(tmp_path / "staged")], capture_output=True, text=True,
                             timeout=180, env=dict(os.environ, RAY_ADDRESS=address))
    finally:
        _stop_cluster(nodes, folders, log)
    result = __import__("json").loads(out.stdout.strip().splitlines()[-1])
    assert result["raised"] == "WorkerEnvironmentError" and result["module"] == "reference", (result, out.stderr[-3000:])
    assert "cannot import the module 'reference'" in result["message"]
    assert result["s"] < 30, result
    assert not (tmp_path / "neff").exists() or not neff_cache(CacheRoots.from_env()).keys()


_LOCAL_DRIVER = r'''
import json, sys
import ray
from reference.flows.ray_executor import RayExecutor
from reference.flows.staged_build import parallel_compile

seen = []
def progress(done, total, rec, wall_s):  # while the run's own Ray is up: where it listens
    seen.append(ray.get_runtime_context().gcs_address)

report = parallel_compile(sys.argv[1], workers=1, executor=RayExecutor(address="local", num_cpus=1), progress=progress)
print(json.dumps({"gcs": seen[0], "initialized_after": ray.is_initialized(),
                  "graphs": [[g.ok, g.cache_hit, g.worker["attempts"]] for g in report.graphs]}), flush=True)
'''


@needs_ray
@pytest.mark.slow
def test_the_local_auto_start_path_starts_ray_for_the_run_and_stops_it(tmp_path, monkeypatch):
    """RayExecutor(address="local"), even with RAY_ADDRESS set: a Ray of the run's own is started
    (one CPU), builds the graph, and is stopped when the run returns: nothing listens at its
    address after."""
    _caches(monkeypatch, tmp_path)
    _stage(tmp_path / "staged", 1)
    env = dict(os.environ, RAY_ADDRESS=f"127.0.0.1:{_free_port()}")  # not used: "local" asks for a Ray of its own
    out = subprocess.run([sys.executable, "-c", _LOCAL_DRIVER, str(tmp_path / "staged")], capture_output=True, text=True,
                         timeout=180, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    result = __import__("json").loads(out.stdout.strip().splitlines()[-1])
    assert result["graphs"] == [[True, False, 1]] and result["initialized_after"] is False, result
    import socket

    host, port = result["gcs"].rsplit(":", 1)
    with socket.socket() as s:
        s.settimeout(2)
        assert s.connect_ex((host, int(port))) != 0  # the run's Ray is stopped


_NODE_LOST_DRIVER = r'''
import functools, json, os, sys, time
from reference.flows.ray_executor import RayExecutor
from reference.flows.staged_build import parallel_compile

def note(folder, graph_name):  # a worker's prologue: its pid, and a first attempt slow enough to lose its node
    first = not any(p.startswith(graph_name + "-") for p in os.listdir(folder))
    with open(os.path.join(folder, f"{graph_name}-{os.getpid()}"), "w"):
        pass
    if first:
        time.sleep(6)

report = parallel_compile(sys.argv[1], workers=2, progress=False,
                          executor=RayExecutor(prologue=functools.partial(note, sys.argv[2]), lost_after_s=20))
print(json.dumps([[g.graph_name, g.ok, g.worker and g.worker["attempts"], g.worker and g.worker["node"], g.error]
                  for g in report.graphs]), flush=True)
os._exit(0)
'''


def _ancestors(pid: int) -> list[int]:
    chain = []
    while pid > 1:
        chain.append(pid)
        try:
            with open(f"/proc/{pid}/stat") as fh:
                pid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return chain


@needs_ray
@pytest.mark.slow
def test_a_node_lost_while_another_lives_reschedules_its_task(tmp_path, monkeypatch):
    """A head without CPUs and two worker nodes (one CPU each); two graphs, one on each node. The
    node running add_0 is killed while add_0's task runs: the run does not abort: add_0 is sent
    again, runs on the node still alive, and both graphs are compiled; add_0's record says two
    attempts."""
    _caches(monkeypatch, tmp_path)
    _stage(tmp_path / "staged", 2)
    notes = tmp_path / "notes"
    notes.mkdir()
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    address, nodes, folders, log_path, log = _own_cluster(tmp_path, 0, 1)
    try:
        folders.append(_node_dir())
        nodes.append(_ray_node([f"--address={address}", "--num-cpus=1", f"--temp-dir={folders[-1]}",
                                "--node-ip-address=127.0.0.1"], log))
        time.sleep(5)  # both worker nodes joined (the run places tasks only on live nodes either way)
        driver = subprocess.Popen([sys.executable, "-c", _NODE_LOST_DRIVER, str(tmp_path / "staged"), str(notes)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ, RAY_ADDRESS=address))
        deadline = time.monotonic() + 120
        while not [p for p in notes.iterdir() if p.name.startswith("add_0-")]:
            assert driver.poll() is None and time.monotonic() < deadline, open(log_path).read()[-3000:]
            time.sleep(0.1)
        (first,) = [p for p in notes.iterdir() if p.name.startswith("add_0-")]
        chain = _ancestors(int(first.name.split("-")[1]))
        (node,) = [n for n in nodes[1:] if n.pid in chain]
        _stop(node)
        out, err = driver.communicate(timeout=180)
    finally:
        _stop_cluster(nodes, folders, log)
    rows = {r[0]: r for r in __import__("json").loads(out.strip().splitlines()[-1])}
    assert rows["add_0"][1] and rows["add_1"][1], (rows, err[-3000:])
    assert rows["add_0"][2] == 2, rows


_MIXED_AUTH_DRIVER = r'''
import json, os, sys, time
import ray
from reference.flows.ray_executor import ClusterLostError, RayExecutor
from reference.flows.staged_build import parallel_compile

# a first Ray in this process with token authentication (Ray's default), then a cluster without
# it: Ray keeps the first mode for the process, so the cluster's workers cannot call this process back
ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
ray.shutdown()
os.environ["RAY_AUTH_MODE"] = "disabled"
start = time.monotonic()
try:
    parallel_compile(sys.argv[1], workers=1, progress=False, executor=RayExecutor(address=sys.argv[2], lost_after_s=5))
    print(json.dumps({"raised": None}), flush=True)
except ClusterLostError as exc:
    print(json.dumps({"raised": "ClusterLostError", "message": str(exc), "not_compiled": exc.not_compiled,
                      "s": time.monotonic() - start}), flush=True)
os._exit(0)
'''


@needs_ray
@pytest.mark.slow
def test_tasks_whose_messages_cannot_reach_the_caller_end_the_run_instead_of_a_hang(tmp_path, monkeypatch):
    """A caller whose process first ran a Ray with token authentication, then connects to a cluster
    without it: the cluster runs the task, but the task's messages are refused by the caller. The
    run does not wait forever: ClusterLostError names the graph and says why, within seconds."""
    _caches(monkeypatch, tmp_path)
    (key,) = _stage(tmp_path / "staged", 1)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    address, nodes, folders, log_path, log = _own_cluster(tmp_path, 1, None)
    try:
        env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
        out = subprocess.run([sys.executable, "-c", _MIXED_AUTH_DRIVER, str(tmp_path / "staged"), address],
                             capture_output=True, text=True, timeout=120, env=env)
    finally:
        _stop_cluster(nodes, folders, log)
    result = __import__("json").loads(out.stdout.strip().splitlines()[-1])
    assert result["raised"] == "ClusterLostError", (result, out.stderr[-3000:])
    assert "have not reported their start" in result["message"] and "RAY_AUTH_MODE" in result["message"]
    assert result["not_compiled"] == [f"graph 'add_0' (key {key})"] and result["s"] < 60, result
