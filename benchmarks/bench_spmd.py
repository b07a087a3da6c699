"""SPMD benchmark: a 4-rank compile of the sharded decoder, SPMD against its MPMD twin and one rank.

Each run starts real ranks (``conformance.harness.launcher``, gloo on loopback) over a fresh, shared
artifact cache. Each rank traces, lowers and builds the artifact of the sharded decoder (tp = 4)
without executing it (``reference.flows.tools.build_only``), starting together after a barrier:

- ``spmd_4_ranks``: all four ranks build the SPMD model;
- ``mpmd_4_ranks``: all four ranks build the MPMD twin (the MoE bakes its expert-parallel rank);
- ``one_rank``: rank 0 alone builds the SPMD model while the other ranks wait.

Reported per run: compiler invocations summed over the world (one per built program), the pieces
compiled, and the wall time (the slowest rank, barrier to built). Targets from the SPMD issue:
SPMD invocations a quarter of MPMD's, and 4-rank SPMD wall time at most 1.3x one rank's. The
ranks share this machine's cores, so with fewer cores than ranks their tracing competes for CPU.
Each launch records the load average before and after it; a ratio whose launches ran on a busy
machine is marked ``busy`` instead of met / not met. ``--repeat N`` repeats the three launches.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from benchmarks._measure import CPUS, fmt, load_line, measured, summary, verdict

WORLD = 4
LAYERS = 1


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
        "lower_s": stats["lower_s"],
        "build_s": stats["build_s"],
    }


def _run(mode: str, only_rank0: bool) -> dict:
    from conformance.harness.launcher import launch

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


def _reps(repeat: int) -> list[dict]:
    return [{
        "one_rank": measured(lambda: _run("spmd", only_rank0=True)),
        "spmd_4_ranks": measured(lambda: _run("spmd", only_rank0=False)),
        "mpmd_4_ranks": measured(lambda: _run("mpmd", only_rank0=False)),
    } for _ in range(repeat)]


def run(out_dir: Path, repeat: int = 1) -> dict:
    reps = _reps(repeat)
    runs = reps[-1]
    # ratio -> (numerator run, denominator run, field, target)
    spec = {
        "spmd_vs_mpmd_invocations": ("spmd_4_ranks", "mpmd_4_ranks", "compiler_invocations", 0.25),
        "spmd_4_ranks_vs_one_rank_wall": ("spmd_4_ranks", "one_rank", "wall_s", 1.3),
        "mpmd_4_ranks_vs_one_rank_wall": ("mpmd_4_ranks", "one_rank", "wall_s", None),
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
    rows = [
        f"SPMD compile of the sharded decoder (tp={WORLD}, {LAYERS} layer, MoE), {CPUS} CPU cores, {repeat} repetition(s)",
        "",
        load_line(all_loads),
        "",
        "Last repetition:",
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
    rows += ["", "| ratio | median [min-max] | target | verdict |", "|---|---:|---:|---|"]
    for name, value in ratios.items():
        t = targets.get(name)
        rows.append(f"| {name} | {fmt(value)} | {'<= ' + str(t['at_most']) if t else ''} | {t['verdict'] if t else ''} |")
    return {
        "runs": runs, "repetitions": reps, "ratios": ratios, "targets": targets, "cpu_count": CPUS,
        "table": "\n".join(rows) + "\n",
    }
