"""Contract: the SPMD scenarios run on ranks that ``torchrun`` started, on two "hosts".

Two ``torchrun`` agents on this machine form one world (``--nnodes 2``, c10d rendezvous on
loopback), each starting ``CONFORMANCE_TORCHRUN_NPROC`` ranks (default 2) that run
``python -m conformance.models.spmd_world``. Each agent is a host of its own: its own cache directories and
its own results directory, nothing shared but the rendezvous. The ranks read rank, world and
master from the environment torchrun set.

- Every rank sees the world torchrun made (ranks, hosts, local ranks).
- The sharded decoder's output on every rank equals the unsharded model's.
- Without a shared filesystem, each host compiles each distinct graph once (its ranks share the
  host's cache), and every rank traces the same text and key.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conformance.harness.env import pythonpath, torchrun_nproc
from conformance.harness.implementation import NotSupported
from conformance.harness.launcher import scenario
from conformance.plugin import SUITE
from conformance.models.spmd_world import AgentsFailed, run_on_hosts
from conformance.harness.tolerances import assert_close

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spmd_ranks"), pytest.mark.capability("spmd")]

HOSTS = 2
NPROC = torchrun_nproc()
SCENARIOS = ["decoder_spmd"]
TIMEOUT = 600.0


@pytest.fixture(scope="module")
def torchrun_world(request, tmp_path_factory):
    impl = request.getfixturevalue("impl")
    hosts, roots = [], []
    for host in range(HOSTS):
        root = tmp_path_factory.mktemp(f"torchrun-host{host}")
        try:
            hosts.append(dict(impl.cache().env(str(root / "caches"))))
        except NotSupported as exc:
            pytest.skip(f"each host needs caches of its own: {exc}")
        roots.append(str(root))
    search_path = os.pathsep.join([str(Path(__file__).resolve().parents[2]), *pythonpath()])
    try:
        return run_on_hosts([dict(h, PYTHONPATH=search_path) for h in hosts], nproc=NPROC, scenarios=SCENARIOS, roots=roots,
                            impl_spec=request.config.stash[SUITE].spec, timeout=TIMEOUT)
    except AgentsFailed as exc:
        pytest.fail(str(exc))


def test_every_rank_sees_the_world_torchrun_made(torchrun_world):
    seen = [r["_rank"] for r in torchrun_world]
    assert [s["rank"] for s in seen] == list(range(HOSTS * NPROC))
    assert {s["world"] for s in seen} == {HOSTS * NPROC}
    for host in range(HOSTS):
        on_host = [s for s in seen if s["host"] == host]
        assert sorted(s["local_rank"] for s in on_host) == list(range(NPROC)), seen
    assert len({s["master"] for s in seen}) == 1, "every rank must join the same master"


def test_sharded_decoder_equals_unsharded_on_every_rank(torchrun_world):
    for rank, res in enumerate(scenario(torchrun_world, "decoder_spmd")):
        assert_close(res["out"], res["expected"], what=f"rank {rank} (torchrun): prefill logits")
        assert_close(res["decode_out"], res["decode_expected"], what=f"rank {rank} (torchrun): decode-step logits")


@pytest.mark.spec("002.spmd.identical-graph")
def test_every_rank_traces_the_same_text_and_key_and_each_host_compiles_once(torchrun_world):
    per_rank = scenario(torchrun_world, "decoder_spmd")
    assert all(r["texts"] == per_rank[0]["texts"] and r["graphs"] == per_rank[0]["graphs"] for r in per_rank)
    distinct = set(per_rank[0]["graphs"].values())
    for host in range(HOSTS):
        ranks = [i for i, r in enumerate(torchrun_world) if r["_rank"]["host"] == host]
        invocations = sum(per_rank[i]["invocations"] for i in ranks)
        assert invocations == len(distinct), f"host {host} (ranks {ranks}) ran the compiler {invocations} times for {len(distinct)} graphs"
