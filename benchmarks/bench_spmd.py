"""SPMD benchmark: a 4-rank compile of the sharded decoder, SPMD against its MPMD twin and one rank,
with ranks from the suite's launcher and from torchrun side by side, and the store's limits.

Each run starts real ranks (gloo on loopback). Each rank traces, lowers and builds the artifact of
the sharded decoder (tp = 4) without executing it (``reference.flows.tools.build_only``),
starting together after a barrier. The suite's launcher (``conformance.harness.launcher``: one host, one
shared artifact cache):

- ``spmd_4_ranks``: all four ranks build the SPMD model;
- ``mpmd_4_ranks``: all four ranks build the MPMD twin (the MoE bakes its expert-parallel rank);
- ``one_rank``: rank 0 alone builds the SPMD model while the other ranks wait.

torchrun (two agents, ``--nnodes 2 --nproc-per-node 2``, c10d rendezvous on loopback, as
``conformance/tests/test_spmd_torchrun.py`` starts them): two "hosts", each with caches of its own and
nothing shared but the rendezvous, with the compile coordinated over the c10d store
(``NEURON_LIBTORCH_STORE_COMPILE=1``): ``torchrun_spmd_2x2``. Reported besides: the bytes each
fetching rank took through the store and how long it waited for them (its build time).

The store (:mod:`reference.spmd.coordination`): the largest single value torch's default store
server accepts (probed in a child process), and the time to publish and to fetch an artifact of
1 to 256 MiB through the coordinator (chunked), on loopback.

Reported per run: compiler invocations summed over the world (one per built program), the pieces
compiled, and the wall time (the slowest rank, barrier to built). Targets from the SPMD issue:
SPMD invocations a quarter of MPMD's, and 4-rank SPMD wall time at most 1.3x one rank's. The
ranks share this machine's cores, so with fewer cores than ranks their tracing competes for CPU.
Each launch records the load average before and after it; a ratio whose launches ran on a busy
machine is marked ``busy`` instead of met / not met. ``--repeat N`` repeats the three launches.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._measure import CPUS, ROOT, fmt, load_line, measured, summary, verdict

WORLD = 4
LAYERS = 1
HOSTS, NPROC = 2, 2  # the torchrun world: two agents of two ranks
STORE_SIZES_MIB = (1, 16, 64, 256)


def _rank(mode: str, only_rank0: bool) -> dict:
    import torch.distributed as dist

    from neuron_fixtures.spmd import sharded_decoder
    from reference.core.metrics import METRICS
    from reference.spmd import NeuronGroupCoordinator, rank_tensor
    from reference.flows.tools import build_only

    rank, world = dist.get_rank(), dist.get_world_size()
    group = NeuronGroupCoordinator.contiguous(world).group
    model, _, local, _ = sharded_decoder(rank, world, group, mode=mode, layers=LAYERS)
    METRICS.reset()
    dist.barrier()
    start = time.perf_counter()
    keys: dict = {}
    stats: dict = {"lower_s": 0.0, "build_s": 0.0}
    if rank == 0 or not only_rank0:
        keys = build_only(model, local, {"rank": rank_tensor(rank)}, stats=stats)
    wall = time.perf_counter() - start
    dist.barrier()
    counters = METRICS.counters()
    return {
        "wall_s": wall,
        "keys": keys,
        "compiler_invocations": counters.get("compiler_invocations", 0),
        "pieces_compiled": counters.get("spmd_piece_compiles", 0),
        "cache_hits": counters.get("neff_cache_hits", 0),
        "store_fetches": counters.get("store_fetches", 0),
        "artifact_bytes": _artifact_bytes(keys.values()),
        "lower_s": stats["lower_s"],
        "build_s": stats["build_s"],
    }


def _artifact_bytes(keys) -> int:
    from reference.core.build_settings import CacheRoots
    from reference.pipeline import neff_cache

    cache = neff_cache(CacheRoots.from_env())
    entries = [cache.get(k, evict=False) for k in set(keys)] if cache is not None else []
    return sum(len(e.artifact) for e in entries if e is not None)


def _run(mode: str, only_rank0: bool) -> dict:
    from conformance.harness.launcher import launch

    with tempfile.TemporaryDirectory(prefix="bench-spmd-") as tmp:
        env = {
            "TORCH_NEURONX_NEFF_CACHE_DIR": os.path.join(tmp, "neff"),
            "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR": os.path.join(tmp, "local"),
            "TORCH_NEURONX_HLO_CACHE_DIR": os.path.join(tmp, "hlo"),
        }
        per_rank = launch(f"{__name__}:_rank", WORLD, kwargs={"mode": mode, "only_rank0": only_rank0}, env=env, timeout=1800)
    return _summed(per_rank)


def _summed(per_rank: list[dict]) -> dict:
    return {
        "compiler_invocations": sum(r["compiler_invocations"] for r in per_rank),
        "pieces_compiled": sum(r["pieces_compiled"] for r in per_rank),
        "distinct_keys": len({k for r in per_rank for k in r["keys"].values()}),
        "wall_s": max(r["wall_s"] for r in per_rank),
        "per_rank_wall_s": [round(r["wall_s"], 3) for r in per_rank],
        "per_rank_invocations": [r["compiler_invocations"] for r in per_rank],
        "per_rank_lower_s": [round(r["lower_s"], 3) for r in per_rank],
        "per_rank_build_s": [round(r["build_s"], 3) for r in per_rank],
    }


# --- torchrun: two agents on loopback, each a host with caches of its own -----------------------------


def _torchrun_main(argv: list[str]) -> int:
    """One rank under torchrun: ``python -m benchmarks.bench_spmd --out DIR --mode spmd``."""
    import torch.distributed as dist

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--mode", default="spmd")
    opts = parser.parse_args(argv)
    dist.init_process_group("gloo", init_method="env://")
    try:
        result = _rank(opts.mode, only_rank0=False)
    finally:
        dist.destroy_process_group()
    os.makedirs(opts.out, exist_ok=True)
    path = os.path.join(opts.out, f"rank{os.environ['RANK']}.json")
    with open(path + ".tmp", "w", encoding="utf-8") as fh:
        json.dump({**result, "host": int(os.environ.get("GROUP_RANK", "0"))}, fh)
    os.replace(path + ".tmp", path)
    return 0


def _run_torchrun(mode: str, timeout: float = 1800.0) -> dict:
    from conformance.harness.launcher import free_port
    from conformance.models.spmd_world import run_agents

    port = free_port()
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", str(HOSTS), "--nproc-per-node", str(NPROC),
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"bench-spmd-{port}",
        "--local-addr", "127.0.0.1", "--max-restarts", "0", "-m", "benchmarks.bench_spmd", "--mode", mode,
    ]
    with tempfile.TemporaryDirectory(prefix="bench-spmd-torchrun-") as tmp:
        roots, envs = [], []
        for host in range(HOSTS):
            root = os.path.join(tmp, f"host{host}")
            os.makedirs(root)
            roots.append(root)
            envs.append({
                **os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo",
                "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                "TORCH_NEURONX_NEFF_CACHE_DIR": os.path.join(root, "neff"),
                "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR": os.path.join(root, "local"),
                "TORCH_NEURONX_HLO_CACHE_DIR": os.path.join(root, "hlo"),
                "NEURON_LIBTORCH_STORE_COMPILE": "1",
            })
        codes = run_agents(command, envs, roots, timeout=timeout, cwd=str(ROOT))
        if any(code != 0 for code in codes):
            logs = [Path(r, "agent.log").read_text(errors="replace")[-3000:] for r in roots]
            raise RuntimeError("torchrun agents failed:\n" + "\n---\n".join(logs))
        per_rank = []
        for rank in range(HOSTS * NPROC):
            found = [os.path.join(r, "out", f"rank{rank}.json") for r in roots]
            path = next(p for p in found if os.path.exists(p))
            per_rank.append(json.loads(Path(path).read_text()))
    fetching = [r for r in per_rank if r["store_fetches"]]
    return {
        **_summed(per_rank),
        "per_rank_store_fetches": [r["store_fetches"] for r in per_rank],
        "store_bytes_per_fetching_rank": max((r["artifact_bytes"] for r in fetching), default=0),
        "store_wait_s": [round(r["build_s"], 3) for r in fetching],
    }


# --- the store: the per-value limit, and artifacts through the coordinator ----------------------------


_PROBE = """
import datetime, sys
from torch.distributed import TCPStore
server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=30))
for size in (8 << 20, (8 << 20) + 1):
    client = TCPStore("127.0.0.1", server.port, is_master=False, timeout=datetime.timedelta(seconds=30))
    try:
        client.set("probe", b"x" * size)
        print("accepted", size, flush=True)
    except Exception:
        print("refused", size, flush=True)
"""


def _store_value_limit() -> dict:
    """Whether the default store server takes a value of exactly 8 MiB and of one byte more (in a
    child: a refused value drops the connection with a page of C++ warnings)."""
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120).stdout
    seen = dict((int(size), verdict) for verdict, size in (line.split() for line in out.splitlines() if line.strip()))
    return {"value_8MiB": seen.get(8 << 20, "?"), "value_8MiB_plus_1": seen.get((8 << 20) + 1, "?")}


def _store_transfers() -> list[dict]:
    """Publish (rank 0 compiles) and fetch (rank 1 waits) artifacts through the coordinator, on a
    TCPStore on loopback; the fetch starts once the artifact is published."""
    import datetime

    from torch.distributed import TCPStore

    from reference.spmd.coordination import CHUNK_BYTES, StoreCoordinator

    server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=120))
    rows = []
    for mib in STORE_SIZES_MIB:
        blob = os.urandom(1 << 20) * mib
        key = f"{mib:032d}"
        t0 = time.perf_counter()
        StoreCoordinator(server, 0, timeout_s=120).build(key, "bench", lambda: (blob, "{}"))
        t1 = time.perf_counter()
        got, _, here = StoreCoordinator(server, 1, timeout_s=120).build(key, "bench", lambda: (b"", ""))
        t2 = time.perf_counter()
        assert got == blob and not here
        rows.append({"mib": mib, "chunks": -(-len(blob) // CHUNK_BYTES), "publish_s": round(t1 - t0, 3), "fetch_s": round(t2 - t1, 3)})
        del blob, got
    return rows


def _reps(repeat: int) -> list[dict]:
    return [{
        "one_rank": measured(lambda: _run("spmd", only_rank0=True)),
        "spmd_4_ranks": measured(lambda: _run("spmd", only_rank0=False)),
        "mpmd_4_ranks": measured(lambda: _run("mpmd", only_rank0=False)),
        "torchrun_spmd_2x2": measured(lambda: _run_torchrun("spmd")),
    } for _ in range(repeat)]


def run(out_dir: Path, repeat: int = 1) -> dict:
    reps = _reps(repeat)
    runs = reps[-1]
    # ratio -> (numerator run, denominator run, field, target)
    spec = {
        "spmd_vs_mpmd_invocations": ("spmd_4_ranks", "mpmd_4_ranks", "compiler_invocations", 0.25),
        "spmd_4_ranks_vs_one_rank_wall": ("spmd_4_ranks", "one_rank", "wall_s", 1.3),
        "mpmd_4_ranks_vs_one_rank_wall": ("mpmd_4_ranks", "one_rank", "wall_s", None),
        "torchrun_2x2_vs_launcher_4_ranks_wall": ("torchrun_spmd_2x2", "spmd_4_ranks", "wall_s", None),
    }
    ratios, targets = {}, {}
    for name, (num, den, field, target) in spec.items():
        s = summary([r[num][field] / max(1e-9, r[den][field]) for r in reps])
        ratios[name] = s
        if target is not None:
            # an invocation count does not depend on the load; a wall time does
            loads = [x for r in reps for k in (num, den) for x in (r[k]["load_before"], r[k]["load_after"])]
            targets[name] = {"at_most": target, "verdict": verdict(s["median"], target, loads if field == "wall_s" else [])}
    all_loads = [x for r in reps for v in r.values() for x in (v["load_before"], v["load_after"])]
    limit = _store_value_limit()
    transfers = measured(lambda: {"rows": _store_transfers()})
    rows = [
        f"SPMD compile of the sharded decoder (tp={WORLD}, {LAYERS} layer, MoE), {CPUS} CPU cores, {repeat} repetition(s)",
        "",
        load_line(all_loads),
        "",
        "Last repetition:",
        "",
        "| run | ranks from | compiler invocations | pieces compiled | distinct keys | wall (s) | per-rank wall (s) | per-rank lowering (s) | per-rank build or wait (s) |",
        "|---|---|---:|---:|---:|---:|---|---|---|",
    ]
    for name, r in runs.items():
        rows.append(
            f"| {name} | {'torchrun, 2 hosts x 2, store' if name.startswith('torchrun') else 'launcher, 1 host, shared cache'} | "
            f"{r['compiler_invocations']} | {r['pieces_compiled']} | {r['distinct_keys']} | {r['wall_s']:.2f} | "
            f"{', '.join(f'{w:.2f}' for w in r['per_rank_wall_s'])} | {', '.join(f'{w:.2f}' for w in r['per_rank_lower_s'])} | "
            f"{', '.join(f'{w:.2f}' for w in r['per_rank_build_s'])} |"
        )
    rows += ["", "| ratio | median [min-max] | target | verdict |", "|---|---:|---:|---|"]
    for name, value in ratios.items():
        t = targets.get(name)
        rows.append(f"| {name} | {fmt(value)} | {'<= ' + str(t['at_most']) if t else ''} | {t['verdict'] if t else ''} |")
    tr = runs["torchrun_spmd_2x2"]
    rows += [
        "",
        f"torchrun through the store: per-rank store fetches {tr['per_rank_store_fetches']}; each fetching rank took "
        f"{tr['store_bytes_per_fetching_rank'] / 2**20:.2f} MiB of artifacts through the store and waited "
        f"{', '.join(f'{w:.2f}' for w in tr['store_wait_s'])} s (its build time: the compiling rank's compile, then the fetch).",
        "",
        f"Store value limit (torch's default TCPStore server): a value of 8 MiB {limit['value_8MiB']}, "
        f"of 8 MiB + 1 byte {limit['value_8MiB_plus_1']}; the coordinator sends artifacts in 4 MiB chunks.",
        "",
        load_line([transfers["load_before"], transfers["load_after"]]),
        "",
        "| artifact (MiB) | chunks | publish (s) | fetch (s) | fetch (MiB/s) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for t in transfers["rows"]:
        rows.append(f"| {t['mib']} | {t['chunks']} | {t['publish_s']:.3f} | {t['fetch_s']:.3f} | {t['mib'] / max(t['fetch_s'], 1e-9):.0f} |")
    return {
        "runs": runs, "repetitions": reps, "ratios": ratios, "targets": targets, "cpu_count": CPUS,
        "store": {"value_limit": limit, "transfers": transfers},
        "table": "\n".join(rows) + "\n",
    }


if __name__ == "__main__":
    raise SystemExit(_torchrun_main(sys.argv[1:]))
