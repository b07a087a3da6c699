"""parallel_compile's executors side by side: the local fork server, Ray on this machine, and a
two-node local Ray cluster, over the same N staged graphs (N = 8 and 32).

Each graph is a distinct chain of twelve 64x64 matmul + tanh layers (about a second of
single-threaded ``iree-compile`` each), staged once; every run builds them into a fresh artifact
cache with two workers. Rows:

- ``local``: the fork server (the default executor);
- ``ray_on_demand``: ``executor="ray"`` with no Ray running, so the run starts a local Ray (2 CPUs)
  and stops it: what a user pays for one call;
- ``ray_started``: the same with a local Ray already initialized in the process and its workers
  warm from a previous run: the per-graph overhead of tasks alone;
- ``ray_two_nodes``: a head and one worker node (1 CPU each) started with ``ray start`` on this
  machine, the caller connected through its address.

Writes ``reports/bench/parallel_compile_ray.json`` (and ``.md``) with the wall times, the ratio of
each Ray row to the local one (goal: Ray on one machine within 1.15x of the fork server for
N = 32) and the load average around each run; on a shared machine read the figures with the load.
With ``--repeat R`` the local row runs first in odd repetitions and after the one-machine Ray rows
in even ones (the two-node row always last), so a drift of the machine's load does not favour one side, and each ratio is also
given as its median over the repetitions, labelled busy when any load sample exceeded the core
count. The quiet rerun: ``make bench BENCH=parallel_compile_ray REPEAT=3``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._measure import CPUS, is_busy, load_now, summary

SIZES = (8, 32)
ARGS = ["-O2", "--target", "trn2"]


def _graph(k: float, layers: int = 12):
    from reference.core.specs import TensorSpec
    from reference.lowering.stablehlo import LoweredGraph

    spec = TensorSpec("float32", (64, 64), (64, 1))
    lines = ["module {", "  func.func @main(%arg0: tensor<64x64xf32>) -> tensor<64x64xf32> {"]
    prev = "%arg0"
    for i in range(layers):
        lines.append(f"    %c{i} = stablehlo.constant dense<{k + i * 0.01:.3f}> : tensor<64x64xf32>")
        lines.append(
            f"    %d{i} = stablehlo.dot_general {prev}, %c{i}, contracting_dims = [1] x [0] : "
            "(tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>"
        )
        lines.append(f"    %t{i} = stablehlo.tanh %d{i} : tensor<64x64xf32>")
        prev = f"%t{i}"
    lines += [f"    return {prev} : tensor<64x64xf32>", "  }", "}", ""]
    return LoweredGraph("\n".join(lines), (spec,), (spec,), layers * 3)


def _compile(staged: str, root: str, tag: str, executor) -> dict:
    from reference.core import env
    from reference.flows import parallel_compile

    with env.override(
        TORCH_NEURONX_NEFF_CACHE_DIR=os.path.join(root, tag, "neff"),
        TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR=os.path.join(root, tag, "local"),
    ):
        before = load_now()
        start = time.perf_counter()
        report = parallel_compile(staged, workers=2, progress=False, executor=executor)
        wall = time.perf_counter() - start
    assert all(g.ok and not g.cache_hit for g in report.graphs), "a graph failed or was a hit; the timing would mean nothing"
    return {"wall_s": round(wall, 2), "load_before_after": [before, load_now()]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_nodes(staged: str, root: str) -> dict:
    """A head and a worker node, each `ray start --block` in a session of its own (stopped as one
    process group, leaving any other Ray on the machine alone)."""
    from reference.flows.ray_executor import RayExecutor

    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    port = _free_port()
    ray_tmp = tempfile.mkdtemp(prefix="rb-", dir="/tmp")  # Ray's socket paths must fit in 107 bytes
    env = dict(os.environ, RAY_AUTH_MODE="disabled")  # a throwaway cluster on the loopback
    common = ["start", "--block", "--disable-usage-stats", "--num-cpus=1", "--node-ip-address=127.0.0.1"]
    nodes = []
    try:
        with open(os.path.join(ray_tmp, "nodes.log"), "w") as log:
            nodes.append(subprocess.Popen(
                [ray_cli, *common, "--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={ray_tmp}"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env,
            ))
            time.sleep(8)
            nodes.append(subprocess.Popen([ray_cli, *common, f"--address=127.0.0.1:{port}"], stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True, env=env))
            time.sleep(8)
            try:
                return _compile(staged, root, "two_nodes", RayExecutor(address=f"127.0.0.1:{port}"))
            finally:
                import ray

                ray.shutdown()
    finally:
        for node in nodes:
            try:
                os.killpg(node.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            node.wait(timeout=30)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def measure(n: int, local_last: bool = False) -> dict:
    import ray

    from reference.backends.capture import stage_graph
    from reference.compiler.driver import CompilerConfig
    from reference.core.build_settings import BuildSettings
    from reference.pipeline import BuildContext

    config, settings = CompilerConfig.from_args(ARGS), BuildSettings.from_env()
    with tempfile.TemporaryDirectory(prefix="bench-pc-ray-") as root:
        staged = os.path.join(root, "staged")
        for k in range(n):
            stage_graph(_graph(float(k)), BuildContext(f"chain_{k}", config, settings), directory=staged)
        row = {"graphs": n, "local_ran": "last" if local_last else "first"}
        if not local_last:
            row["local"] = _compile(staged, root, "local", "local")
        row["ray_on_demand"] = _compile(staged, root, "ray_on_demand", "ray")
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
        try:
            _compile(staged, root, "ray_warm_up", "ray")  # starts the workers and their imports
            row["ray_started"] = _compile(staged, root, "ray_started", "ray")
        finally:
            ray.shutdown()
        if local_last:
            row["local"] = _compile(staged, root, "local", "local")
        row["ray_two_nodes"] = _two_nodes(staged, root)  # last: its nodes are other processes to stop
    for name in ("ray_on_demand", "ray_started", "ray_two_nodes"):
        row[f"{name}_ratio"] = round(row[name]["wall_s"] / row["local"]["wall_s"], 2)
    return row


def run(out_dir: Path, repeat: int = 1) -> dict:
    try:
        import ray  # noqa: F401
    except ImportError:
        return {"skipped": "ray is not installed (the project's cluster extra: pip install -e '.[cluster]')"}
    # every Ray here is a throwaway on the loopback, and one process must not mix auth modes: Ray
    # reads the mode once per process, and a caller expecting tokens refuses the streamed task
    # messages of a cluster started without them (the run would wait for tasks that finished)
    saved = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    try:
        rows = [measure(n, local_last=rep % 2 == 1) for rep in range(repeat) for n in SIZES]
    finally:
        if saved is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = saved
    lines = [
        "# parallel_compile: local fork server vs Ray", "",
        f"{CPUS} CPUs; two workers; each run into a fresh artifact cache. Ratio: wall time over the local row's "
        "(goal for Ray on one machine at N = 32: at most 1.15).", "",
        "| graphs | local (s) | Ray on demand (s, ratio) | Ray started (s, ratio) | Ray, 2 nodes (s, ratio) | load before/after local | load range, all runs |",
        "|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        loads = [x for name in ("local", "ray_on_demand", "ray_started", "ray_two_nodes") for x in r[name]["load_before_after"]]
        lines.append(
            f"| {r['graphs']} | {r['local']['wall_s']} | {r['ray_on_demand']['wall_s']} ({r['ray_on_demand_ratio']}x) | "
            f"{r['ray_started']['wall_s']} ({r['ray_started_ratio']}x) | {r['ray_two_nodes']['wall_s']} "
            f"({r['ray_two_nodes_ratio']}x) | {r['local']['load_before_after']} | {min(loads)}-{max(loads)} |"
        )
    medians = {}
    for n in SIZES:
        mine = [r for r in rows if r["graphs"] == n]
        loads = [x for r in mine for name in ("local", "ray_on_demand", "ray_started", "ray_two_nodes") for x in r[name]["load_before_after"]]
        medians[n] = {name: summary([r[f"{name}_ratio"] for r in mine]) for name in ("ray_on_demand", "ray_started", "ray_two_nodes")}
        medians[n]["busy"] = is_busy(loads)
        medians[n]["load_range"] = [min(loads), max(loads)]
    if repeat > 1:
        lines += ["", "Median ratio over the repetitions (range):", "",
                  "| graphs | Ray on demand | Ray started | Ray, 2 nodes | load range | machine |", "|---:|---:|---:|---:|---|---|"]
        for n, m in medians.items():
            cells = " | ".join(f"{m[k]['median']:.2f}x ({m[k]['min']:.2f}-{m[k]['max']:.2f})" for k in ("ray_on_demand", "ray_started", "ray_two_nodes"))
            lines.append(f"| {n} | {cells} | {m['load_range'][0]}-{m['load_range'][1]} | {'busy' if m['busy'] else 'quiet'} |")
    return {"rows": rows, "median_ratios": medians, "cpu_count": CPUS, "goal_ratio_n32": 1.15, "table": "\n".join(lines) + "\n"}
