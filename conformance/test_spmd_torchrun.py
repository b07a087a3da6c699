"""Contract: the SPMD scenarios run on ranks that ``torchrun`` started, on two "hosts".

Two ``torchrun`` agents on this machine form one world (``--nnodes 2``, c10d rendezvous on
loopback), each starting ``CONFORMANCE_TORCHRUN_NPROC`` ranks (default 2) that run
``python -m conformance.spmd_world``. Each agent is a host of its own: its own cache directories and
its own results directory, nothing shared but the rendezvous. The ranks read rank, world and
master from the environment torchrun set.

- Every rank sees the world torchrun made (ranks, hosts, local ranks).
- The sharded decoder's output on every rank equals the unsharded model's.
- Without a shared filesystem, each host compiles each distinct graph once (its ranks share the
  host's cache), and every rank traces the same text and key.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance.implementation import NotSupported
from conformance.launcher import free_port
from conformance.plugin import SUITE
from conformance.spmd_world import collect
from conformance.tolerances import assert_close

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spmd_ranks"), pytest.mark.capability("spmd")]

HOSTS = 2
NPROC = int(os.environ.get("CONFORMANCE_TORCHRUN_NPROC", "2"))
SCENARIOS = ["decoder_spmd"]
TIMEOUT = 600.0
_TAIL = 4000


def _agent_command(port: int, out: Path, spec: str | None) -> list[str]:
    command = [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", str(HOSTS), "--nproc-per-node", str(NPROC),
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"conformance-{port}",
        "--local-addr", "127.0.0.1", "--max-restarts", "0",
        "-m", "conformance.spmd_world", "--scenarios", ",".join(SCENARIOS), "--out", str(out),
    ]
    return command + (["--impl", spec] if spec else [])


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the agent and the ranks it started
        except ProcessLookupError:
            pass
    proc.wait()


@pytest.fixture(scope="module")
def torchrun_world(request, tmp_path_factory):
    impl = request.getfixturevalue("impl")
    spec = request.config.stash[SUITE].spec
    port = free_port()
    hosts, agents = [], []
    try:
        for host in range(HOSTS):
            root = tmp_path_factory.mktemp(f"torchrun-host{host}")
            try:
                caches = dict(impl.cache_env(str(root / "caches")))
            except NotSupported as exc:
                pytest.skip(f"each host needs caches of its own: {exc}")
            env = dict(os.environ, **caches, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo",
                       PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")]))
            log = open(root / "agent.log", "wb")
            agents.append(subprocess.Popen(_agent_command(port, root / "out", spec), env=env, stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True))
            hosts.append(root)
        start = time.monotonic()
        while any(a.poll() is None for a in agents):
            failed = [h for h, a in enumerate(agents) if a.poll() not in (None, 0)]
            if failed or time.monotonic() - start > TIMEOUT:
                break
            time.sleep(0.2)
        wall = time.monotonic() - start
    finally:
        for a in agents:
            _stop(a)
    codes = [a.returncode for a in agents]
    if any(c != 0 for c in codes):
        logs = "\n".join(
            f"--- host {h} (torchrun exit status {c}):\n{(hosts[h] / 'agent.log').read_text(errors='replace')[-_TAIL:]}"
            for h, c in enumerate(codes)
        )
        pytest.fail(f"torchrun on {HOSTS} hosts x {NPROC} ranks failed or ran past {TIMEOUT:g} s after {wall:.0f} s:\n{logs}")
    return collect([str(h / "out") for h in hosts], HOSTS * NPROC)


def _scenario(results: list[dict], name: str) -> list[dict]:
    per_rank = [r[name] for r in results]
    for rank, res in enumerate(per_rank):
        if res["status"] == "skip":
            pytest.skip(res["reason"])
        if res["status"] == "error":
            pytest.fail(f"scenario {name!r} failed on rank {rank}: {res['error']}\n{res['traceback']}")
    return per_rank


def test_every_rank_sees_the_world_torchrun_made(torchrun_world):
    seen = [r["_rank"] for r in torchrun_world]
    assert [s["rank"] for s in seen] == list(range(HOSTS * NPROC))
    assert {s["world"] for s in seen} == {HOSTS * NPROC}
    for host in range(HOSTS):
        on_host = [s for s in seen if s["host"] == host]
        assert sorted(s["local_rank"] for s in on_host) == list(range(NPROC)), seen
    assert len({s["master"] for s in seen}) == 1, "every rank must join the same master"


def test_sharded_decoder_equals_unsharded_on_every_rank(torchrun_world):
    for rank, res in enumerate(_scenario(torchrun_world, "decoder_spmd")):
        assert_close(res["out"], res["expected"], what=f"rank {rank} (torchrun): prefill logits")
        assert_close(res["decode_out"], res["decode_expected"], what=f"rank {rank} (torchrun): decode-step logits")


def test_every_rank_traces_the_same_text_and_key_and_each_host_compiles_once(torchrun_world):
    per_rank = _scenario(torchrun_world, "decoder_spmd")
    assert all(r["texts"] == per_rank[0]["texts"] and r["graphs"] == per_rank[0]["graphs"] for r in per_rank)
    distinct = set(per_rank[0]["graphs"].values())
    for host in range(HOSTS):
        ranks = [i for i, r in enumerate(torchrun_world) if r["_rank"]["host"] == host]
        invocations = sum(per_rank[i]["invocations"] for i in ranks)
        assert invocations == len(distinct), f"host {host} (ranks {ranks}) ran the compiler {invocations} times for {len(distinct)} graphs"
