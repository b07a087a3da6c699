"""Launch N ranks as real processes on torch.distributed (gloo on loopback) and gather results.

``launch("package.module:function", world_size, kwargs={...})`` starts ``world_size`` processes
(fresh interpreters, or forks of a :func:`rank_server` that imported torch once). Each joins one
gloo process group (TCP rendezvous on 127.0.0.1 at a free port), calls ``function(**kwargs)`` and
returns its value to the parent (``torch.save``, so tensors travel).
The parent returns the values in rank order.

A rank that raises, exits or dies fails the whole launch at once: the other ranks are killed (they
would otherwise wait forever in a collective) and :class:`RankFailure` carries the failing rank's
exit status and the tail of its output. A launch that has not finished within ``timeout`` seconds
is killed the same way, naming the ranks that were still running. So a broken rank costs at most
``timeout`` seconds, never a hung CI job.

The scenario function runs inside the rank; it reads its rank and world with
``torch.distributed.get_rank()`` / ``get_world_size()``. Children inherit the parent's environment
(cache directories, ``NEURON_LIBTORCH_SPMD_STRICT``, ...) plus ``env``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import pytest

from conformance.harness.env import rank_threads, rank_variables
from conformance.harness.child import exit_not_supported, raise_if_not_supported
from conformance.harness.forkserver import ForkedProcess, ForkServer, start_module
from conformance.harness.implementation import NotSupported

DEFAULT_TIMEOUT = 180.0
_TAIL = 4000
_PORT_RETRIES = 3


class RankFailure(AssertionError):
    """One or more ranks failed, died or hung; the message carries their output."""

    def __init__(self, message: str, *, ranks: Sequence[int], outputs: Mapping[int, str], returncodes: Mapping[int, int | None]):
        super().__init__(message)
        self.ranks = list(ranks)
        self.outputs = dict(outputs)
        self.returncodes = dict(returncodes)


@dataclass
class _Rank:
    rank: int
    proc: subprocess.Popen | ForkedProcess
    log_path: str
    result_path: str

    def output(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as fh:
                return fh.read()
        except OSError:
            return ""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scenario_name(fn: Callable | str) -> str:
    if isinstance(fn, str):
        return fn
    return f"{fn.__module__}:{fn.__qualname__}"


def _tail(text: str) -> str:
    text = text.rstrip()
    return text if len(text) <= _TAIL else "...\n" + text[-_TAIL:]


def launch(
    scenario: Callable | str,
    world_size: int,
    *,
    kwargs: Mapping[str, Any] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    env: Mapping[str, str] | None = None,
    server: ForkServer | None = None,
) -> list[Any]:
    """Run ``scenario(**kwargs)`` on ``world_size`` ranks; return each rank's value, in rank order.

    With ``server`` (:func:`rank_server`) the ranks fork from it instead of starting fresh
    interpreters, which spares each rank the import of torch; a rank whose environment needs a
    fresh interpreter (:func:`conformance.harness.forkserver.needs_fresh_interpreter`) still gets one
    (:func:`conformance.harness.forkserver.start_module`).

    Raises :class:`RankFailure` when a rank fails, dies or the launch outlives ``timeout``.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    name = scenario_name(scenario)
    for attempt in range(_PORT_RETRIES):
        try:
            return _launch_once(name, world_size, dict(kwargs or {}), timeout, dict(env or {}), server)
        except RankFailure as exc:
            # The free port can be taken between our probe and rank 0's bind: retry on a new one.
            busy = any("address already in use" in out.lower() or "eaddrinuse" in out.lower() for out in exc.outputs.values())
            if not busy or attempt == _PORT_RETRIES - 1:
                raise
    raise AssertionError("unreachable")


def rank_server(preload: Sequence[str] = ("torch", "torch._dynamo")) -> ForkServer:
    """A fork server for :func:`launch`, started with the thread settings the ranks get (they are
    read when torch starts): pass it as ``server=`` to every launch of a module, close it after."""
    return ForkServer(preload, env=dict(os.environ, OMP_NUM_THREADS=rank_threads()))


def _launch_once(name: str, world_size: int, kwargs: dict, timeout: float, extra_env: dict,
                 server: ForkServer | None) -> list[Any]:
    workdir = tempfile.mkdtemp(prefix="ranks-")
    port = free_port()
    job_path = os.path.join(workdir, "job.pkl")
    with open(job_path, "wb") as fh:
        pickle.dump({"scenario": name, "kwargs": kwargs, "timeout": timeout}, fh)
    env = dict(os.environ)
    env.update(extra_env)
    env.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        WORLD_SIZE=str(world_size),
        OMP_NUM_THREADS=rank_threads(env),
    )
    env.setdefault("GLOO_SOCKET_IFNAME", _loopback_interface())
    ranks: list[_Rank] = []
    try:
        for r in range(world_size):
            log_path = os.path.join(workdir, f"rank{r}.log")
            result_path = os.path.join(workdir, f"rank{r}.result")
            renv = dict(env, RANK=str(r), LOCAL_RANK=str(r))
            args = ["--job", job_path, "--rank", str(r), "--result", result_path]
            proc = start_module("conformance.harness.launcher", args, env=renv, log=log_path, server=server)
            ranks.append(_Rank(r, proc, log_path, result_path))
        deadline = time.monotonic() + timeout
        while True:
            codes = {rk.rank: rk.proc.poll() for rk in ranks}
            failed = [r for r, c in codes.items() if c not in (None, 0)]
            if failed:
                _kill(ranks)
                outs = {rk.rank: rk.output() for rk in ranks}
                for r in failed:
                    raise_if_not_supported(codes[r], outs[r], f"{name}, rank {r}")
                detail = "\n".join(
                    f"--- rank {r} exited with status {codes[r]}{_signal_name(codes[r])}; its output:\n{_tail(outs[r])}" for r in failed
                )
                raise RankFailure(
                    f"{name} on {world_size} ranks: rank(s) {failed} failed; the others were stopped.\n{detail}",
                    ranks=failed,
                    outputs=outs,
                    returncodes=codes,
                )
            if all(c == 0 for c in codes.values()):
                break
            if time.monotonic() > deadline:
                hung = [r for r, c in codes.items() if c is None]
                _kill(ranks)
                outs = {rk.rank: rk.output() for rk in ranks}
                detail = "\n".join(f"--- rank {r} (still running), its output:\n{_tail(outs[r])}" for r in hung)
                raise RankFailure(
                    f"{name} on {world_size} ranks: rank(s) {hung} did not finish within {timeout:g}s and were killed.\n{detail}",
                    ranks=hung,
                    outputs=outs,
                    returncodes=codes,
                )
            time.sleep(0.05)
        results = []
        import torch

        for rk in ranks:
            try:
                results.append(torch.load(rk.result_path, weights_only=False))
            except Exception as exc:  # a rank exited 0 without a result: that is a failure too
                raise RankFailure(
                    f"{name}: rank {rk.rank} exited without a result ({exc}); its output:\n{_tail(rk.output())}",
                    ranks=[rk.rank],
                    outputs={rk.rank: rk.output()},
                    returncodes={rk.rank: 0},
                ) from None
        return results
    finally:
        _kill(ranks)
        shutil.rmtree(workdir, ignore_errors=True)


def _signal_name(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f" (killed by {signal.Signals(-code).name})"
        except ValueError:
            return ""
    return ""


def scenario(results: list[dict], name: str) -> list[dict]:
    """Every rank's result of one scenario (from :func:`launch` or a torchrun world): skips on the
    first rank that answered NotSupported, fails with the traceback of the first that raised."""
    per_rank = [r[name] for r in results]
    for rank, res in enumerate(per_rank):
        if res["status"] == "skip":
            pytest.skip(res["reason"])
        if res["status"] == "error":
            pytest.fail(f"scenario {name!r} failed on rank {rank}: {res['error']}\n{res['traceback']}")
    return per_rank


def _kill(ranks: list[_Rank]) -> None:
    for rk in ranks:
        if rk.proc.poll() is None:
            try:
                os.killpg(rk.proc.pid, signal.SIGKILL)  # the rank and anything it started
            except (ProcessLookupError, PermissionError):
                rk.proc.kill()
    for rk in ranks:
        try:
            rk.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def _loopback_interface() -> str:
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        names = []
    for candidate in ("lo", "lo0"):
        if candidate in names:
            return candidate
    return names[0] if names else "lo"


def _resolve(name: str) -> Callable:
    module_name, _, attr = name.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _child(job_path: str, rank: int, result_path: str) -> int:
    with open(job_path, "rb") as fh:
        job = pickle.load(fh)
    import torch
    import torch.distributed as dist

    ranks = rank_variables()
    world = int(ranks["WORLD_SIZE"])
    init = f"tcp://{ranks['MASTER_ADDR']}:{ranks['MASTER_PORT']}"
    dist.init_process_group(
        "gloo", init_method=init, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=float(job["timeout"]))
    )
    try:
        fn = _resolve(job["scenario"])
        value = fn(**job["kwargs"])
        tmp = result_path + ".tmp"
        torch.save(value, tmp)
        os.replace(tmp, result_path)
    except NotSupported as exc:  # the parent turns this status into a skip
        exit_not_supported(exc, os._exit)
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)  # skip the process group's teardown: the peers are being stopped anyway
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one rank of conformance.harness.launcher (internal)")
    parser.add_argument("--job", required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--result", required=True)
    ns = parser.parse_args(argv)
    return _child(ns.job, ns.rank, ns.result)


if __name__ == "__main__":
    sys.exit(main())
