"""The runtime picks IREE's driver per artifact from the arithmetic of one call.

The estimate is read from StableHLO text (``reference.lowering.cost``); the choice and its override
are ``reference.runtime.choose_driver``. The end-to-end test lowers and compiles real graphs.
"""

from __future__ import annotations

import pytest
import torch

from reference import runtime
from reference.core import env
from reference.core.build_settings import BuildSettings
from reference.core.errors import EnvVarError
from reference.lowering.cost import estimate_flops

_TEXT = """
func.func @main(%arg0: tensor<2x64xf32>, %arg1: tensor<64x192xf32>, %arg2: tensor<8x1x16xf32>, %arg3: tensor<8x16x32xf32>) -> tensor<2x192xf32> {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<2x64xf32>, tensor<64x192xf32>) -> tensor<2x192xf32>
    %1 = stablehlo.dot_general %arg2, %arg3, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<8x1x16xf32>, tensor<8x16x32xf32>) -> tensor<8x1x32xf32>
    %2 = stablehlo.add %0, %0 : tensor<2x192xf32>
    %3 = stablehlo.convolution(%a, %b) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<16x3x3x3xf32>) -> tensor<1x16x6x6xf32>
    return %2 : tensor<2x192xf32>
}
"""


def test_the_estimate_counts_contractions_convolutions_and_elements():
    dot = 2 * (2 * 192) * 64
    batched = 2 * (8 * 1 * 32) * 16
    add = 2 * 192
    conv = 2 * (1 * 16 * 6 * 6) * (3 * 3 * 3)
    assert estimate_flops(_TEXT) == dot + batched + add + conv


def test_a_lowered_linear_counts_at_least_its_matmul():
    from reference.lowering.stablehlo import lower_to_stablehlo

    m, k, n = 16, 64, 32
    from torch.fx.experimental.proxy_tensor import make_fx

    aten = make_fx(lambda x, w: torch.mm(x, w))(torch.randn(m, k), torch.randn(k, n))
    flops = estimate_flops(lower_to_stablehlo(aten, graph_name="mm").hlo)
    assert 2 * m * k * n <= flops <= 2 * m * k * n + 4 * (m * k + k * n + m * n)


def _driver_setting() -> str:
    return BuildSettings.from_env().runtime_driver  # what a compile request made now carries


def test_small_calls_run_on_the_callers_thread_and_large_ones_on_the_workers(monkeypatch):
    monkeypatch.delenv(env.RUNTIME_DRIVER, raising=False)
    assert _driver_setting() == "auto"
    assert runtime.choose_driver(1000, "auto") == "local-sync"
    assert runtime.choose_driver(runtime.SYNC_MAX_FLOPS, "auto") == "local-sync"
    assert runtime.choose_driver(runtime.SYNC_MAX_FLOPS + 1, "auto") == "local-task"
    assert runtime.choose_driver(None, "auto") == "local-task"  # unknown work: the threaded driver
    monkeypatch.setenv(env.RUNTIME_DRIVER, "LOCAL-TASK")
    assert runtime.choose_driver(10, _driver_setting()) == "local-task"
    monkeypatch.setenv(env.RUNTIME_DRIVER, "local-sync")
    assert runtime.choose_driver(1 << 40, _driver_setting()) == "local-sync"


def test_an_unknown_driver_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv(env.RUNTIME_DRIVER, "cuda")
    with pytest.raises(EnvVarError) as info:
        _driver_setting()
    assert env.RUNTIME_DRIVER in str(info.value) and "local-sync" in str(info.value)
    with pytest.raises(ValueError, match="'cuda' is not known"):  # a caller passing a setting of its own
        runtime.choose_driver(10, "cuda")


def test_both_drivers_give_the_compiled_graphs_result(monkeypatch):
    """One artifact, loaded once per driver: the same outputs, equal to eager."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).eval()
    x = torch.randn(4, 32)
    outs = {}
    for driver in runtime.DRIVERS:
        monkeypatch.setenv(env.RUNTIME_DRIVER, driver)
        torch._dynamo.reset()
        with torch.no_grad():
            outs[driver] = torch.compile(model, backend="neuron", dynamic=False)(x)
        assert {a.driver for a in runtime._LOADED if a._vm_fn is not None} >= {driver}
    torch._dynamo.reset()
    with torch.no_grad():
        expected = model(x)
    torch.testing.assert_close(outs["local-sync"], outs["local-task"], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(outs["local-sync"], expected, rtol=1e-5, atol=1e-5)


# Both scripts below wait for their forked child this way: a child still running after 90 s is
# killed and the script says HUNG (the runtime's threads a fork does not copy).
_WAIT_OR_KILL = r"""
import os, sys, time

def wait_or_kill(pid):
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return
        time.sleep(0.1)
    os.kill(pid, 9)
    print("HUNG")
    sys.exit(3)
"""

_FORKED_CHILD = r"""
import os, sys, time
import torch
from reference import runtime

def run(width):  # a new module each time: Dynamo compiles its forward again (no reset in a forked child)
    torch.manual_seed(width)
    model = torch.nn.Sequential(torch.nn.Linear(width, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).eval()
    x = torch.randn(4, width)
    with torch.no_grad():
        got = torch.compile(model, backend="neuron", dynamic=False)(x)
        want = model(x)
    return float((got - want).abs().max())

assert run(32) < 1e-4  # the parent: the threaded driver's workers start
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(read)
    err = run(48)  # a new graph, compiled (its compiler a child of this child) and loaded in the child
    grandchild = os.fork()  # and a child of the child: what the first fork kept stays kept
    if grandchild == 0:
        os._exit(0 if run(40) < 1e-4 else 1)
    _, status = os.waitpid(grandchild, 0)
    drivers = sorted({a.driver for a in runtime._LOADED if a._vm_fn is not None})
    os.write(write, f"{err if status == 0 else 'grandchild-failed'} {','.join(drivers)}".encode())
    os._exit(0)
os.close(write)
wait_or_kill(pid)
print("CHILD", os.read(read, 4096).decode())
"""


@pytest.mark.slow
def test_a_child_forked_after_the_threaded_driver_ran_runs_its_graphs_on_its_own_thread(tmp_path):
    """A process that ran graphs on ``local-task`` forks (the lowering probe's children do): the
    child compiles and runs a new graph, which must not wait for the parent's worker threads
    (a fork copies only the forking thread) and must match eager. A real subprocess does the fork,
    so a hang is a timeout here, not a stuck test worker."""
    import os
    import subprocess
    import sys

    # OMP_NUM_THREADS=1 as the Makefile sets it: an eager op in a forked child would otherwise wait
    # for libgomp's workers, which a fork does not copy either (the lowering probe's test covers that)
    run_env = {**os.environ, "OMP_NUM_THREADS": "1", env.RUNTIME_DRIVER: "local-task", env.NEFF_CACHE_DIR: str(tmp_path / "neff"),
               env.HLO_CACHE_DIR: str(tmp_path / "hlo")}
    out = subprocess.run([sys.executable, "-c", _WAIT_OR_KILL + _FORKED_CHILD], env=run_env, capture_output=True, text=True, timeout=300)
    assert "HUNG" not in out.stdout, "the forked child waited for the parent's runtime threads"
    assert out.returncode == 0, out.stderr[-2000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("CHILD")][0]
    err, drivers = line.split()[1:]
    assert float(err) < 1e-4
    assert "local-sync" in drivers.split(",")


_INHERITED_CALL = r"""
import os, sys, time
import torch
import reference  # noqa: F401 - registers the backend
from reference import runtime

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).eval()
compiled = torch.compile(model, backend="neuron", dynamic=False)
x = torch.randn(4, 32)
with torch.no_grad():
    want = model(x)
    assert float((compiled(x) - want).abs().max()) < 1e-4  # compiled and run in the parent, on local-task
    drivers_before = sorted({a.driver for a in runtime._LOADED if a._vm_fn is not None})

def serve():  # the same compiled function, inherited loaded, called in the child
    with torch.no_grad():
        err = float((compiled(x) - want).abs().max())
    return err, sorted({a.driver for a in runtime._LOADED if a._vm_fn is not None})

read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(read)
    err, drivers = serve()
    grandchild = os.fork()  # a child of the child calls it too
    if grandchild == 0:
        os._exit(0 if serve()[0] < 1e-4 else 1)
    _, status = os.waitpid(grandchild, 0)
    os.write(write, f"{err if status == 0 else 'grandchild-failed'} {','.join(drivers)}".encode())
    os._exit(0)
os.close(write)
wait_or_kill(pid)
with torch.no_grad():
    assert float((compiled(x) - want).abs().max()) < 1e-4  # the parent's threaded runtime is untouched
print("BEFORE", ",".join(drivers_before))
print("CHILD", os.read(read, 4096).decode())
"""


@pytest.mark.slow
def test_a_graph_loaded_on_the_threaded_driver_before_a_fork_runs_in_the_child(tmp_path):
    """A pre-forking server: the parent compiles a model and runs it on ``local-task``, then forks;
    the child (and its own child) call the same compiled function, whose artifact was loaded
    before the fork. It loads itself again on the child's own thread and matches eager, instead of
    waiting forever for the parent's worker threads, which a fork does not copy. A real subprocess
    does the fork, so a hang is a timeout here."""
    import os
    import subprocess
    import sys

    # OMP_NUM_THREADS=1 as the Makefile sets it: an eager op in a forked child would otherwise wait
    # for libgomp's workers, which a fork does not copy either (the lowering probe's test covers that)
    run_env = {**os.environ, "OMP_NUM_THREADS": "1", env.RUNTIME_DRIVER: "local-task", env.NEFF_CACHE_DIR: str(tmp_path / "neff"),
               env.HLO_CACHE_DIR: str(tmp_path / "hlo")}
    out = subprocess.run([sys.executable, "-c", _WAIT_OR_KILL + _INHERITED_CALL], env=run_env, capture_output=True, text=True, timeout=300)
    assert "HUNG" not in out.stdout, "the inherited artifact waited for the parent's runtime threads"
    assert out.returncode == 0, out.stderr[-2000:]
    before = [ln for ln in out.stdout.splitlines() if ln.startswith("BEFORE")][0].split()[1]
    assert before == "local-task"
    err, drivers = [ln for ln in out.stdout.splitlines() if ln.startswith("CHILD")][0].split()[1:]
    assert float(err) < 1e-4
    assert drivers.split(",") == ["local-sync"]
