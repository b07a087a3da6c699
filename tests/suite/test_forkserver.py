"""The fork server the suite starts its child processes from (conformance/harness/forkserver.py).

Real processes throughout: the server is a real interpreter, its children are real forks, kills
are real signals. The server here preloads only ``json`` to stay fast; what it preloads does not
change how a child is started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance.harness.forkserver import (ForkedProcess, ForkServer, ForkServerError, needs_fresh_interpreter, run_module,
                                           start_module)

CHILD = '''
import json, os, subprocess, sys, time
mode = sys.argv[1]
if mode == "report":
    print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "flag": os.environ.get("FS_FLAG"),
                      "own_group": os.getpgrp() == os.getpid(), "stdin": sys.stdin.read(),
                      "path0": sys.path[0]}))
    sys.exit(int(os.environ.get("FS_EXIT", "0")))
if mode == "grandchild":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    open(sys.argv[2], "w").write(str(child.pid))
    time.sleep(60)
if mode == "spin":
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass
if mode == "raise":
    raise ValueError("the module raised")
if mode == "hashseed":
    print("hash_randomization", sys.flags.hash_randomization)
    print("hash", hash("conformance-forkserver"), "seed", os.environ.get("PYTHONHASHSEED"))
'''


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("forkserver")
    (d / "fs_child.py").write_text(CHILD)
    return d


@pytest.fixture(scope="module")
def server(workdir):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(workdir), *sys.path]), FS_FLAG="server")
    with ForkServer(("json",), env=env) as srv:
        yield srv


def _env(server, **extra) -> dict[str, str]:
    return {**server.env, **extra}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def test_a_child_runs_its_module_with_the_requested_argv_env_cwd_and_exit_status(server, workdir, tmp_path):
    log = tmp_path / "report.log"
    proc = server.spawn("fs_child", ["report", "x y"], env=_env(server, FS_FLAG="on", FS_EXIT="3"),
                        log=str(log), cwd=str(tmp_path))
    assert proc.wait(timeout=60) == 3
    import json

    seen = json.loads(log.read_text().strip().splitlines()[-1])
    assert seen["argv"] == ["report", "x y"]
    assert seen["cwd"] == str(tmp_path)
    assert seen["flag"] == "on"
    assert seen["own_group"], "the child is not the leader of a process group of its own"
    assert seen["stdin"] == "", "standard input is not /dev/null"
    assert proc.cpu_s is not None and proc.cpu_s >= 0


def test_the_environment_is_exactly_the_requested_one(server, tmp_path):
    env = _env(server)
    env.pop("FS_FLAG", None)
    log = tmp_path / "noflag.log"
    assert server.spawn("fs_child", ["report"], env=env, log=str(log)).wait(timeout=60) == 0
    assert '"flag": null' in log.read_text(), "a variable of the server's environment leaked in"


def test_an_exception_in_the_module_exits_1_with_its_traceback_in_the_log(server, tmp_path):
    log = tmp_path / "raise.log"
    assert server.spawn("fs_child", ["raise"], env=_env(server), log=str(log)).wait(timeout=60) == 1
    assert "ValueError: the module raised" in log.read_text()


def test_standard_error_goes_to_its_own_file_when_asked(server, tmp_path):
    out, err = tmp_path / "raise.out", tmp_path / "raise.err"
    assert server.spawn("fs_child", ["raise"], env=_env(server), log=str(out), err_log=str(err)).wait(timeout=60) == 1
    assert "ValueError: the module raised" in err.read_text()
    assert "ValueError" not in out.read_text()
    assert server.spawn("fs_child", ["report"], env=_env(server), log=str(out), err_log=str(err)).wait(timeout=60) == 0
    assert '"argv": ["report"]' in out.read_text() and '"argv"' not in err.read_text()


@pytest.mark.parametrize("forked", [True, False], ids=["forked", "fresh"])
def test_run_module_returns_status_and_both_streams_and_kills_a_run_past_its_timeout(server, tmp_path, forked):
    srv = server if forked else None
    done = run_module("fs_child", ["raise"], env=_env(server), cwd=str(tmp_path), server=srv)
    assert done.returncode == 1 and "ValueError: the module raised" in done.stderr and done.stdout == ""
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_module("fs_child", ["grandchild", str(tmp_path / f"gc-{forked}.pid")], env=_env(server), server=srv, timeout=2)
    assert time.monotonic() - start < 30
    grandchild = int((tmp_path / f"gc-{forked}.pid").read_text())
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild), "what the timed-out run started outlived it"


def test_kill_reaches_the_child_and_what_it_started(server, tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    proc = server.spawn("fs_child", ["grandchild", str(pidfile)], env=_env(server), log=str(tmp_path / "gc.log"))
    deadline = time.monotonic() + 60
    while not (pidfile.exists() and pidfile.read_text()):
        assert time.monotonic() < deadline, "the child never started its own child"
        time.sleep(0.02)
    grandchild = int(pidfile.read_text())
    assert proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.1)
    proc.kill()
    assert proc.wait(timeout=30) == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(grandchild), "the kill did not reach the process the child started"


def test_cpu_time_of_a_busy_child_comes_back(server, tmp_path):
    proc = server.spawn("fs_child", ["spin"], env=_env(server), log=str(tmp_path / "spin.log"))
    assert proc.wait(timeout=60) == 0
    assert proc.cpu_s >= 0.25


def test_closing_the_server_kills_its_running_children(workdir, tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(workdir), *sys.path]))
    pidfile = tmp_path / "orphan.pid"
    srv = ForkServer(("json",), env=env)
    proc = srv.spawn("fs_child", ["grandchild", str(pidfile)], env=env, log=str(tmp_path / "orphan.log"))
    deadline = time.monotonic() + 60
    while not (pidfile.exists() and pidfile.read_text()):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    srv.close()
    deadline = time.monotonic() + 10
    while (_alive(proc.pid) or _alive(int(pidfile.read_text()))) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(proc.pid) and not _alive(int(pidfile.read_text()))


def test_a_preload_that_fails_is_a_clear_error(tmp_path):
    with ForkServer(("no_such_module_anywhere",)) as srv:
        with pytest.raises(ForkServerError, match="preloaded module failed"):
            srv.spawn("json.tool", [], env=dict(os.environ), log=str(tmp_path / "x.log"))


@pytest.mark.parametrize(
    "changed, fresh",
    [
        ({"PYTHONHASHSEED": "4242"}, True),
        ({"TORCHINDUCTOR_FX_GRAPH_CACHE": "0"}, True),
        ({"OMP_NUM_THREADS": "7"}, True),
        ({"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}, True),
        ({"TORCH_NEURONX_NEFF_CACHE_DIR": "/elsewhere"}, False),
        ({"NEURON_LIBTORCH_SPMD_STRICT": "1"}, False),
        ({"PYTHONPATH": "/elsewhere"}, False),
        ({}, False),
    ],
)
def test_which_environments_need_a_fresh_interpreter(changed, fresh):
    base = {"HOME": "/root", "OMP_NUM_THREADS": "1"}
    assert needs_fresh_interpreter({**base, **changed}, base) is fresh
    # a variable the server had and the child drops counts as a change too
    if changed and fresh:
        assert needs_fresh_interpreter(base, {**base, **changed})


def test_start_module_forks_when_it_can_and_starts_a_fresh_interpreter_when_the_env_needs_one(server, tmp_path):
    env = {k: v for k, v in server.env.items() if k != "PYTHONHASHSEED"}
    forked = start_module("fs_child", ["hashseed"], env=env, log=str(tmp_path / "forked.log"), server=server)
    assert isinstance(forked, ForkedProcess) and forked.wait(timeout=60) == 0
    assert "hash_randomization 1" in (tmp_path / "forked.log").read_text()
    # PYTHONHASHSEED=0 turns hash randomization off, which only a new interpreter can do
    fresh = start_module("fs_child", ["hashseed"], env={**env, "PYTHONHASHSEED": "0"}, log=str(tmp_path / "fresh.log"),
                         server=server)
    assert isinstance(fresh, subprocess.Popen) and fresh.wait(timeout=60) == 0
    assert "hash_randomization 0" in (tmp_path / "fresh.log").read_text()
    alone = start_module("fs_child", ["hashseed"], env=env, log=str(tmp_path / "alone.log"))
    assert isinstance(alone, subprocess.Popen) and alone.wait(timeout=60) == 0


def test_the_server_starts_with_the_first_child_and_refuses_children_once_closed(workdir, tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(workdir), *sys.path]))
    srv = ForkServer(("json",), env=env)
    assert not any(srv._interpreters), "a server nobody used started a process"
    assert srv.spawn("fs_child", ["report"], env=env, log=str(tmp_path / "first.log")).wait(timeout=60) == 0
    srv.close()
    with pytest.raises(ForkServerError, match="closed"):
        srv.spawn("fs_child", ["report"], env=env, log=str(tmp_path / "late.log"))
    unused = ForkServer(("json",), env=env)
    unused.close()  # closing one that never started is fine


def _hash_of(log: Path) -> str:
    line = next(ln for ln in log.read_text().splitlines() if ln.startswith("hash "))
    return line.split()[1]


def test_consecutive_children_get_different_hash_seeds_unless_the_server_pins_one(workdir, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    env["PYTHONPATH"] = os.pathsep.join([str(workdir), *sys.path])
    with ForkServer(("json",), env=env) as srv:
        assert len(set(srv.hash_seeds)) == 2
        kids = [srv.spawn("fs_child", ["hashseed"], env=env, log=str(tmp_path / f"kid{i}.log")) for i in range(3)]
        assert [k.wait(timeout=60) for k in kids] == [0, 0, 0]
        hashes = [_hash_of(tmp_path / f"kid{i}.log") for i in range(3)]
        # a string hashes differently under the two seeds, and the third child is the first's seed again
        assert hashes[0] != hashes[1] and hashes[0] == hashes[2], hashes
        assert kids[0].hash_seed != kids[1].hash_seed and kids[0].hash_seed in srv.hash_seeds
    pinned = {**env, "PYTHONHASHSEED": "123"}
    with ForkServer(("json",), env=pinned) as srv:
        assert srv.hash_seeds == ["123"]
        kids = [srv.spawn("fs_child", ["hashseed"], env=pinned, log=str(tmp_path / f"pin{i}.log")) for i in range(2)]
        assert [k.wait(timeout=60) for k in kids] == [0, 0]
        assert _hash_of(tmp_path / "pin0.log") == _hash_of(tmp_path / "pin1.log")
        assert kids[0].hash_seed == "123"
