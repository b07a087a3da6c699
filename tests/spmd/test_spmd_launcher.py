"""conformance.harness.launcher: N real rank processes on gloo; failures and hangs carry the rank's output.

The scenarios below run inside the launched ranks (this module is importable there through the
PYTHONPATH the tests pass). The ranks fork from a rank server (as the suite's SPMD module does),
except in one case that starts fresh interpreters, the launcher's path without a server.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from conformance.harness.launcher import RankFailure, launch, rank_server

pytestmark = pytest.mark.slow
ENV = {"PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}


def sum_of_ranks():
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(t)
    return {"rank": dist.get_rank(), "world": dist.get_world_size(), "sum": t}


def rank1_dies():
    import torch.distributed as dist

    if dist.get_rank() == 1:
        print("rank one says goodbye", flush=True)
        os._exit(3)
    dist.barrier()  # would wait forever for rank 1 without the launcher


def rank1_raises():
    import torch.distributed as dist

    if dist.get_rank() == 1:
        raise ValueError("a bad value on rank one")
    dist.barrier()


def rank1_hangs():
    import torch.distributed as dist

    if dist.get_rank() == 1:
        print("rank one is stuck", flush=True)
        time.sleep(3600)
    return dist.get_rank()


@pytest.fixture(scope="module")
def server():
    with rank_server() as srv:
        yield srv


@pytest.mark.parametrize("world, forked", [(2, False), (4, True)], ids=["fresh-2", "forked-4"])
def test_results_come_back_in_rank_order(world, forked, request):
    server = request.getfixturevalue("server") if forked else None
    results = launch(f"{__name__}:sum_of_ranks", world, env=ENV, timeout=120, server=server)
    assert [r["rank"] for r in results] == list(range(world))
    assert all(r["world"] == world for r in results)
    assert all(float(r["sum"]) == sum(range(world)) for r in results)


def test_a_rank_that_dies_fails_the_launch_with_its_output(server):
    with pytest.raises(RankFailure) as info:
        launch(f"{__name__}:rank1_dies", 2, env=ENV, timeout=120, server=server)
    # rank 0 may fail too in the same instant (gloo sees its peer vanish); rank 1 is always named
    assert 1 in info.value.ranks
    assert info.value.returncodes[1] == 3
    assert "rank one says goodbye" in str(info.value) and "status 3" in str(info.value)


def test_a_rank_that_raises_reports_its_traceback(server):
    with pytest.raises(RankFailure) as info:
        launch(f"{__name__}:rank1_raises", 2, env=ENV, timeout=120, server=server)
    assert 1 in info.value.ranks
    assert "ValueError: a bad value on rank one" in str(info.value)


def test_a_hung_rank_is_killed_at_the_bound_and_named(server):
    # forked ranks start in well under a second, so a short bound still lets rank 0 finish first
    with pytest.raises(RankFailure) as info:
        launch(f"{__name__}:rank1_hangs", 2, env=ENV, timeout=12, server=server)
    assert 1 in info.value.ranks
    assert "did not finish within 12s" in str(info.value)
    assert "rank one is stuck" in info.value.outputs[1]


def test_bad_world_size_is_rejected():
    with pytest.raises(ValueError, match="world_size"):
        launch(f"{__name__}:sum_of_ranks", 0)
