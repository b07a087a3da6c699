"""Compile coordination over a c10d store (reference.spmd.coordination).

The coordinator's own tests run real processes (forked) on a real ``TCPStore`` on loopback; the
compile they coordinate is a stand-in function (this module tests the coordination, not the
compiler), which in the kill test really kills its process with SIGKILL. The last test runs the
whole pipeline on two real ranks (gloo), each with its own caches, and counts compiles.
"""

from __future__ import annotations

import datetime
import os
import signal
import time
from pathlib import Path

import pytest
import torch
from torch.distributed import TCPStore

from conformance.harness.launcher import launch
from reference.flows.forked import run_forked
from reference.spmd.coordination import StoreCompileError, StoreCoordinator

KEY = "k" * 32


@pytest.fixture
def store():
    server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=60))
    yield server


def _client(port: int) -> TCPStore:
    return TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=60))


def _rank(port: int, rank: int, compile, *, after_claim: bool = False, **kwargs):
    """One rank's call, in a forked child; ``after_claim``: wait until someone claimed the key."""

    def run():
        client = _client(port)
        if after_claim:
            while not client.check([f"neuron/compile/{KEY}/claim"]):
                time.sleep(0.01)
        coordinator = StoreCoordinator(client, rank, timeout_s=kwargs.pop("timeout_s", 60), **kwargs)
        artifact, metadata, here = coordinator.build(KEY, "g", compile)
        return artifact, metadata, here

    return (f"rank {rank}", run)


@pytest.mark.spec("002.cache.rank0-compiles-others-wait")
def test_one_rank_compiles_and_the_others_fetch_its_artifact(store, tmp_path):
    marks = tmp_path / "compiles"
    marks.mkdir()

    def compile():
        (marks / str(os.getpid())).touch()
        time.sleep(0.5)
        return b"\x00artifact\xff" * 1000, '{"cache_key": "k"}'

    outcomes = run_forked([_rank(store.port, r, compile) for r in range(3)], workers=3, timeout=120)
    assert all(o.ok for o in outcomes), [o.describe() for o in outcomes]
    assert len(list(marks.iterdir())) == 1, "the compiler ran more than once"
    assert {o.value[0] for o in outcomes} == {b"\x00artifact\xff" * 1000}
    assert sorted(o.value[2] for o in outcomes) == [False, False, True]


def test_a_compiling_rank_that_dies_unblocks_the_others_naming_key_and_rank(store):
    def die():
        os.kill(os.getpid(), signal.SIGKILL)  # the compiling rank dies mid-compile
        return b"", ""

    start = time.monotonic()
    killed, waiter = run_forked(
        [_rank(store.port, 0, die), _rank(store.port, 1, die, after_claim=True, heartbeat_timeout_s=2.0)],
        workers=2, timeout=120,
    )
    assert not killed.ok and killed.exitcode == -signal.SIGKILL
    assert isinstance(waiter.exception, StoreCompileError), waiter.describe()
    assert waiter.exception.key == KEY and waiter.exception.compiler_rank == 0
    assert "heartbeat stopped" in str(waiter.exception) and KEY in str(waiter.exception)
    assert time.monotonic() - start < 60


def test_a_failed_compile_is_reported_to_the_waiters(store):
    def fail():
        time.sleep(0.3)
        raise RuntimeError("the compiler said no")

    owner, waiter = run_forked([_rank(store.port, 0, fail), _rank(store.port, 1, fail, after_claim=True)], workers=2, timeout=120)
    assert owner.error_type == "RuntimeError"
    assert isinstance(waiter.exception, StoreCompileError)
    assert "its compile failed: RuntimeError: the compiler said no" in str(waiter.exception)


def test_the_wait_is_bounded_even_while_the_compiler_is_alive(store):
    def slow():
        time.sleep(6)  # alive for four times the waiter's bound
        return b"late", ""

    _, waiter = run_forked(
        [_rank(store.port, 0, slow), _rank(store.port, 1, slow, after_claim=True, timeout_s=1.5)], workers=2, timeout=60,
    )
    assert isinstance(waiter.exception, StoreCompileError)
    assert "did not finish within 1.5 s (NEURON_LIBTORCH_STORE_WAIT_TIMEOUT)" in str(waiter.exception)


def test_an_artifact_larger_than_the_stores_value_limit_goes_through_whole(store):
    # torch's default (libuv) store server refuses a value over 8 MiB: the artifact goes in chunks
    big = os.urandom(1 << 20) * 9 + b"tail"
    outcomes = run_forked(
        [_rank(store.port, 0, lambda: (big, "{}")), _rank(store.port, 1, lambda: (b"", ""), after_claim=True)],
        workers=2, timeout=120,
    )
    assert [o.exception for o in outcomes] == [None, None]
    assert sorted(o.value[2] for o in outcomes) == [False, True]
    assert all(o.value[0] == big for o in outcomes)
    assert int(store.get(f"neuron/compile/{KEY}/chunks")) == 3


def test_an_artifact_that_does_not_match_its_digest_is_refused(store):
    store.set(f"neuron/compile/{KEY}/claim", "0")
    store.set(f"neuron/compile/{KEY}/artifact/0", b"tampered")
    store.set(f"neuron/compile/{KEY}/chunks", "1")
    store.set(f"neuron/compile/{KEY}/metadata", "{}")
    store.set(f"neuron/compile/{KEY}/done", "0" * 64)
    with pytest.raises(StoreCompileError, match="does not match its digest"):
        StoreCoordinator(store, 1, timeout_s=5).build(KEY, "g", lambda: (b"", ""))


# --- the pipeline on two real ranks, no shared cache ------------------------------------------------


def compile_with_own_caches(root: str, coordinate: bool):
    import torch.distributed as dist

    from reference.core.metrics import METRICS

    rank = dist.get_rank()
    mine = os.path.join(root, f"rank{rank}")
    os.environ.update(
        TORCH_NEURONX_NEFF_CACHE_DIR=os.path.join(mine, "neff"), TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR=os.path.join(mine, "local"),
        TORCH_NEURONX_HLO_CACHE_DIR=os.path.join(mine, "hlo"), NEURON_LIBTORCH_STORE_COMPILE="1" if coordinate else "0",
    )

    def fn(x):
        return torch.tanh(x @ x.T) * 3

    x = torch.arange(12, dtype=torch.float32).view(3, 4) / 10
    before = METRICS.counters()
    out = torch.compile(fn, backend="neuron")(x)
    after = METRICS.counters()
    return {
        "ok": torch.allclose(out, fn(x), atol=1e-5),
        "invocations": after.get("compiler_invocations", 0) - before.get("compiler_invocations", 0),
        "fetches": after.get("store_fetches", 0) - before.get("store_fetches", 0),
        "entries": sorted(os.listdir(os.path.join(mine, "neff"))),
    }


@pytest.mark.slow
@pytest.mark.spec("002.cache.rank0-compiles-others-wait")
def test_two_ranks_without_a_shared_cache_compile_once(tmp_path):
    env = {"PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    results = launch(f"{__name__}:compile_with_own_caches", 2, kwargs={"root": str(tmp_path), "coordinate": True},
                     env=env, timeout=600)
    assert all(r["ok"] for r in results), results
    assert sorted(r["invocations"] for r in results) == [0, 1], results
    assert sorted(r["fetches"] for r in results) == [0, 1], results
    assert results[0]["entries"] == results[1]["entries"] and results[0]["entries"], "both caches hold the one artifact"


@pytest.mark.slow
def test_two_torchrun_hosts_compile_once_for_the_world(tmp_path):
    """Two torchrun agents (--nnodes 2, c10d rendezvous on loopback), 2 ranks each, each host with
    caches of its own: with the store coordination the sharded decoder's distinct graphs compile
    once for the whole world, and every rank's output equals the unsharded model's."""
    from conformance.models.spmd_world import run_on_hosts

    hosts, roots = [], []
    for host in range(2):
        root = tmp_path / f"host{host}"
        root.mkdir()
        hosts.append({
            "TORCH_NEURONX_NEFF_CACHE_DIR": str(root / "neff"), "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR": str(root / "local"),
            "TORCH_NEURONX_HLO_CACHE_DIR": str(root / "hlo"), "NEURON_LIBTORCH_STORE_COMPILE": "1",
            "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]),
        })
        roots.append(str(root))
    results = run_on_hosts(hosts, nproc=2, scenarios=["decoder_spmd"], roots=roots, timeout=600)
    per_rank = [r["decoder_spmd"] for r in results]
    assert all(r["status"] == "ok" for r in per_rank), [r.get("error") for r in per_rank]
    distinct = set(per_rank[0]["graphs"].values())
    assert len(distinct) == 2  # prefill and one decode step
    assert sum(r["invocations"] for r in per_rank) == len(distinct), [r["invocations"] for r in per_rank]
    for rank, r in enumerate(per_rank):
        assert torch.allclose(r["out"], r["expected"], atol=1e-4), f"rank {rank}: prefill logits"
        assert torch.allclose(r["decode_out"], r["decode_expected"], atol=1e-4), f"rank {rank}: decode-step logits"
    for root in roots:
        assert sorted(os.listdir(os.path.join(root, "neff"))) == sorted(distinct), "each host's cache holds both artifacts"
