"""The SPMD scenarios as one rank of a world someone else started: ``torchrun``, a cluster's
launcher, or anything that sets torch.distributed's environment.

    torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint HOST:PORT \\
        -m conformance.models.spmd_world --scenarios decoder_spmd,deferred_decoder --out results/

Each rank reads ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` (and, where set,
``LOCAL_RANK`` and ``GROUP_RANK``, its host's number) from the environment, joins one gloo group
with ``init_method="env://"``, runs the named scenarios of :mod:`conformance.models.spmd_scenarios`
through the adapter (``--impl`` or ``CONFORMANCE_IMPL``) and writes its results to
``<out>/rank<RANK>.pt`` (``torch.save``, atomically: ``{scenario: result}``, plus ``"_rank"``,
what the rank read from its environment), which :func:`collect` reads back in rank order. Every host writes into its own ``--out``: nothing here needs a filesystem the hosts share.
Scenarios that need a directory per host (the deferred flow) make one on each host.

The suite's own launcher (:mod:`conformance.harness.launcher`) stays the way to start ranks on one host
from a test; this module is the way to start them on many.
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import sys
from typing import Any, Sequence

from conformance.harness.env import impl_spec, rank_variables

#: What torch.distributed's ``env://`` initialisation reads; torchrun sets all of them.
REQUIRED_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


class RankEnvironmentError(RuntimeError):
    """The process was not started as a rank: a variable of :data:`REQUIRED_ENV` is missing or bad."""


def rank_environment(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """``rank``, ``world``, ``master`` (``host:port``), ``local_rank`` and ``host`` (the node's
    number: ``GROUP_RANK``, 0 when unset) from the environment a launcher set."""
    environ = dict(rank_variables() if environ is None else environ)
    missing = [name for name in REQUIRED_ENV if not environ.get(name)]
    if missing:
        raise RankEnvironmentError(
            f"conformance.models.spmd_world runs as one rank of a world, but {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not set; start it with torchrun "
            "(torchrun --nnodes N --nproc-per-node M --rdzv-backend c10d --rdzv-endpoint HOST:PORT -m conformance.models.spmd_world ...) "
            "or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT yourself"
        )

    def number(name: str, default: str | None = None) -> int:
        raw = environ.get(name) or default
        try:
            return int(raw)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise RankEnvironmentError(f"environment variable {name}={raw!r} is not an integer") from None

    out: dict[str, Any] = {
        "rank": number("RANK"),
        "world": number("WORLD_SIZE"),
        "local_rank": number("LOCAL_RANK", environ["RANK"]),
        "host": number("GROUP_RANK", "0"),
        "master": f"{environ['MASTER_ADDR']}:{environ['MASTER_PORT']}",
    }
    if not 0 <= out["rank"] < out["world"]:
        raise RankEnvironmentError(f"RANK={out['rank']} is outside the world of WORLD_SIZE={out['world']} ranks")
    return out


def result_path(out_dir: str, rank: int) -> str:
    return os.path.join(out_dir, f"rank{rank}.pt")


def collect(out_dirs: Sequence[str], world: int) -> list[dict]:
    """Every rank's results, in rank order, from the ``--out`` directories of all hosts; raises
    ``FileNotFoundError`` naming the ranks that wrote none."""
    import torch

    found: dict[int, str] = {}
    for d in out_dirs:
        for rank in range(world):
            path = result_path(d, rank)
            if os.path.exists(path):
                found[rank] = path
    missing = [r for r in range(world) if r not in found]
    if missing:
        raise FileNotFoundError(f"no results from rank(s) {missing} in {list(out_dirs)}")
    return [torch.load(found[r], weights_only=False) for r in range(world)]


class AgentsFailed(AssertionError):
    """A torchrun agent exited with a failure or the world ran past its timeout; carries the logs."""


def run_on_hosts(
    hosts: Sequence[dict[str, str]], *, nproc: int, scenarios: Sequence[str], roots: Sequence[str],
    impl_spec: str | None = None, timeout: float = 600.0,
) -> list[dict]:
    """Start one ``torchrun`` agent per host on this machine (``--nnodes len(hosts)``, c10d
    rendezvous on loopback), each with ``hosts[i]`` added to its environment and ``roots[i]`` as
    its own directory (``out/`` and ``agent.log`` go there), ``nproc`` ranks each running this
    module with ``scenarios``; return every rank's results in rank order. Raises
    :class:`AgentsFailed` with every agent's log when one fails or ``timeout`` passes (the agents
    and their ranks are killed)."""
    import time

    from conformance.harness.launcher import free_port

    port = free_port()
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", str(len(hosts)), "--nproc-per-node", str(nproc),
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"conformance-{port}",
        "--local-addr", "127.0.0.1", "--max-restarts", "0", "-m", "conformance.models.spmd_world", "--scenarios", ",".join(scenarios),
    ] + (["--impl", impl_spec] if impl_spec else [])
    start = time.monotonic()
    envs = [{**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": _loopback_interface(), **extra} for extra in hosts]
    codes = run_agents(command, envs, roots, timeout=timeout)
    if any(c != 0 for c in codes):
        logs = []
        for host, (code, root) in enumerate(zip(codes, roots)):
            with open(os.path.join(root, "agent.log"), encoding="utf-8", errors="replace") as fh:
                logs.append(f"--- host {host} (torchrun exit status {code}):\n{fh.read()[-4000:]}")
        raise AgentsFailed(
            f"torchrun on {len(hosts)} hosts x {nproc} ranks failed or ran past {timeout:g} s after "
            f"{time.monotonic() - start:.0f} s:\n" + "\n".join(logs)
        )
    return collect([os.path.join(root, "out") for root in roots], len(hosts) * nproc)


def run_agents(command: Sequence[str], envs: Sequence[dict[str, str]], roots: Sequence[str], *, timeout: float,
               cwd: str | None = None) -> list[int]:
    """Start one ``torchrun`` agent per environment, ``command`` plus ``--out <root>/out``, its
    output in ``<root>/agent.log``; wait until all end, one fails or ``timeout`` passes, kill what
    is left (each agent's whole process group: the agent and its ranks) and return the exit codes."""
    import signal
    import subprocess
    import time

    agents = []
    start = time.monotonic()
    try:
        for env, root in zip(envs, roots):
            with open(os.path.join(root, "agent.log"), "wb") as log:
                agents.append(subprocess.Popen([*command, "--out", os.path.join(root, "out")], env=env, cwd=cwd, stdout=log,
                                               stderr=subprocess.STDOUT, start_new_session=True))
        while any(a.poll() is None for a in agents):
            if any(a.poll() not in (None, 0) for a in agents) or time.monotonic() - start > timeout:
                break
            time.sleep(0.2)
    finally:
        for a in agents:
            if a.poll() is None:
                try:
                    os.killpg(a.pid, signal.SIGKILL)  # the agent and the ranks it started
                except ProcessLookupError:
                    pass
            a.wait()
    return [a.returncode for a in agents]


def _loopback_interface() -> str:
    names = [name for _, name in socket.if_nameindex()] if hasattr(socket, "if_nameindex") else []
    return next((n for n in ("lo", "lo0") if n in names), names[0] if names else "lo")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.models.spmd_world", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", required=True, help="comma-separated names from conformance/models/spmd_scenarios.py")
    parser.add_argument("--out", required=True, help="directory (on this host) for rank<RANK>.pt")
    parser.add_argument("--impl", default=None, help="package.module:factory (default: CONFORMANCE_IMPL or the reference)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a collective may wait for a peer")
    ns = parser.parse_args(argv)
    ranks = rank_environment()

    from conformance.models import spmd_scenarios as _spmd_scenarios

    names = [n for n in ns.scenarios.split(",") if n]
    unknown = sorted(set(names) - set(_spmd_scenarios.SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; known: {sorted(_spmd_scenarios.SCENARIOS)}")
    os.makedirs(ns.out, exist_ok=True)
    if ranks["master"].startswith(("127.", "localhost")):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", _loopback_interface())

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=ns.timeout))
    try:
        results: dict[str, Any] = _spmd_scenarios.run(ns.impl or impl_spec(), names)
        results["_rank"] = ranks  # what this rank read from its environment, for the caller to check
        path = result_path(ns.out, ranks["rank"])
        torch.save(results, path + ".tmp")
        os.replace(path + ".tmp", path)
        status = {name: results[name]["status"] for name in names}
        print(f"conformance.models.spmd_world: rank {ranks['rank']} of {ranks['world']} (host {ranks['host']}): {status}", flush=True)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
