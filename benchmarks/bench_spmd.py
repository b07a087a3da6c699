"""SPMD benchmark: a 4-rank compile of the sharded decoder, SPMD against its MPMD twin and one rank.

Each run starts real ranks (``conformance.launcher``, gloo on loopback) over a fresh, shared
artifact cache. Each rank traces, lowers and builds the artifact of the sharded decoder (tp = 4)
without executing it (``reference.spmd.program.build_only``), starting together after a barrier:

- ``spmd_4_ranks``: all four ranks build the SPMD model;
- ``mpmd_4_ranks``: all four ranks build the MPMD twin (the MoE bakes its expert-parallel rank);
- ``one_rank``: rank 0 alone builds the SPMD model while the other ranks wait.

Reported per run: compiler invocations summed over the world (one per built program), the pieces
compiled, and the wall time (the slowest rank, barrier to built). Targets from the SPMD issue:
SPMD invocations a quarter of MPMD's, and 4-rank SPMD wall time at most 1.3x one rank's. The
ranks share this machine's cores, so with fewer cores than ranks their tracing competes for CPU.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

WORLD = 4
LAYERS = 1


def _rank(mode: str, only_rank0: bool) -> dict:
    import torch.distributed as dist

    from neuron_fixtures.spmd import sharded_decoder
    from reference.core.metrics import METRICS
    from reference.spmd import NeuronGroupCoordinator, rank_tensor
    from reference.spmd.program import build_only

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
        "lower_s": stats["lower_s"],
        "build_s": stats["build_s"],
    }


def _run(mode: str, only_rank0: bool) -> dict:
    from conformance.launcher import launch

    with tempfile.TemporaryDirectory(prefix="bench-spmd-") as tmp:
        env = {
            "TORCH_NEURONX_NEFF_CACHE_DIR": os.path.join(tmp, "neff"),
            "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR": os.path.join(tmp, "local"),
            "TORCH_NEURONX_HLO_CACHE_DIR": os.path.join(tmp, "hlo"),
        }
        per_rank = launch(f"{__name__}:_rank", WORLD, kwargs={"mode": mode, "only_rank0": only_rank0}, env=env, timeout=1800)
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


def run(out_dir: Path) -> dict:
    load_before = os.getloadavg()
    runs = {
        "one_rank": _run("spmd", only_rank0=True),
        "spmd_4_ranks": _run("spmd", only_rank0=False),
        "mpmd_4_ranks": _run("mpmd", only_rank0=False),
    }
    inv_ratio = runs["spmd_4_ranks"]["compiler_invocations"] / max(1, runs["mpmd_4_ranks"]["compiler_invocations"])
    wall_ratio = runs["spmd_4_ranks"]["wall_s"] / runs["one_rank"]["wall_s"]
    ratios = {
        "spmd_vs_mpmd_invocations": inv_ratio,
        "spmd_4_ranks_vs_one_rank_wall": wall_ratio,
        "mpmd_4_ranks_vs_one_rank_wall": runs["mpmd_4_ranks"]["wall_s"] / runs["one_rank"]["wall_s"],
    }
    targets = {
        "spmd_vs_mpmd_invocations": {"at_most": 0.25, "met": inv_ratio <= 0.25},
        "spmd_4_ranks_vs_one_rank_wall": {"at_most": 1.3, "met": wall_ratio <= 1.3},
    }
    rows = [
        f"SPMD compile of the sharded decoder (tp={WORLD}, {LAYERS} layer, MoE), {os.cpu_count()} CPU cores",
        "",
        "| run | compiler invocations | pieces compiled | distinct keys | wall (s) | per-rank wall (s) | per-rank lowering (s) | per-rank build or wait (s) |",
        "|---|---:|---:|---:|---:|---|---|---|",
    ]
    for name, r in runs.items():
        rows.append(
            f"| {name} | {r['compiler_invocations']} | {r['pieces_compiled']} | {r['distinct_keys']} | {r['wall_s']:.2f} | "
            f"{', '.join(f'{w:.2f}' for w in r['per_rank_wall_s'])} | {', '.join(f'{w:.2f}' for w in r['per_rank_lower_s'])} | "
            f"{', '.join(f'{w:.2f}' for w in r['per_rank_build_s'])} |"
        )
    rows += ["", "| ratio | value | target | met |", "|---|---:|---:|---|"]
    for name, value in ratios.items():
        t = targets.get(name)
        rows.append(f"| {name} | {value:.3f} | {'<= ' + str(t['at_most']) if t else ''} | {('yes' if t['met'] else 'no') if t else ''} |")
    load = {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()]}
    rows += ["", f"Load average (1, 5, 15 min) before: {load['before']}, after: {load['after']} (other work on the machine skews wall times)."]
    return {
        "runs": runs, "ratios": ratios, "targets": targets, "cpu_count": os.cpu_count(), "load_average": load,
        "table": "\n".join(rows) + "\n",
    }
