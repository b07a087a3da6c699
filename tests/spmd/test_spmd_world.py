"""``conformance.models.spmd_world``: what a rank reads from the environment its launcher set, and reading
the results back (the torchrun run itself is conformance/tests/test_spmd_torchrun.py)."""

from __future__ import annotations

import pytest
import torch

from conformance.models.spmd_world import RankEnvironmentError, collect, rank_environment, result_path

TORCHRUN = {"RANK": "3", "WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
            "LOCAL_RANK": "1", "GROUP_RANK": "1"}


def test_reads_what_torchrun_sets():
    assert rank_environment(TORCHRUN) == {"rank": 3, "world": 4, "local_rank": 1, "host": 1, "master": "127.0.0.1:29500"}


def test_a_plain_env_launch_is_one_host():
    env = {k: v for k, v in TORCHRUN.items() if k not in ("LOCAL_RANK", "GROUP_RANK")}
    assert rank_environment(env) == {"rank": 3, "world": 4, "local_rank": 3, "host": 0, "master": "127.0.0.1:29500"}


@pytest.mark.parametrize("drop", ["RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"])
def test_a_missing_variable_says_how_to_start_a_rank(drop):
    env = {k: v for k, v in TORCHRUN.items() if k != drop}
    with pytest.raises(RankEnvironmentError, match=f"{drop} is not set; start it with torchrun"):
        rank_environment(env)


def test_bad_numbers_are_named():
    with pytest.raises(RankEnvironmentError, match=r"LOCAL_RANK='x' is not an integer"):
        rank_environment(dict(TORCHRUN, LOCAL_RANK="x"))
    with pytest.raises(RankEnvironmentError, match=r"RANK=4 is outside the world of WORLD_SIZE=4"):
        rank_environment(dict(TORCHRUN, RANK="4"))


def test_collect_reads_every_hosts_directory_in_rank_order(tmp_path):
    hosts = [tmp_path / "h0", tmp_path / "h1"]
    for rank, host in ((0, hosts[0]), (1, hosts[1]), (2, hosts[0])):
        host.mkdir(exist_ok=True)
        torch.save({"rank": rank}, result_path(str(host), rank))
    assert [r["rank"] for r in collect([str(h) for h in hosts], 3)] == [0, 1, 2]
    with pytest.raises(FileNotFoundError, match=r"rank\(s\) \[3\]"):
        collect([str(h) for h in hosts], 4)
