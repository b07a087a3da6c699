"""ATOM compilation benchmark: ``python -m benchmarks atom`` writes ``reports/bench/atom.json|md``.

A small decoder (``conformance/models/atom_model.py``, 4 layers, attention as the splitting op) is run
in fresh processes, each with its own empty Inductor, NEFF and HLO cache directories:

- eager (level 0): the peer every ratio is taken against;
- level 2 (one graph) with Inductor, and level 3 (piecewise) with the Inductor and the reference
  piece compilers: cold compile time (the first call, tracing included). Level 2 has no reference
  row: its single graph holds the attention custom op, which torch-mlir cannot lower (at level 3
  the op is a splitting op and runs between compiled pieces). ``level3_inductor`` is the
  standalone adaptor (the default on this torch), ``level3_inductor_fx`` the ``compile_fx`` one;
- level 3 again in a fresh process on the warm cache directories: warm start (time from spawn to
  the first output, and the first call alone), with the pieces compiled counted (should be 0);
- steady decode step: the median over many calls at a size in ``compile_sizes`` (4 rows) and at a
  size outside it (5 rows), after warm-up, and its ratio to eager's step of the same run. The
  reference pieces' target is at most :data:`REFERENCE_STEP_TARGET` times eager at either size;
- a profile of one step (cProfile over :data:`PROFILE_STEPS` steps at the compile size, the
  functions that take the most time of their own, per step) for the rows in :data:`PROFILED`.

The machine load (1-minute average) is recorded around every process, and beside each row; a row
measured while the load exceeded the core count is labelled busy, and so is a verdict that rests
on one. Figures on a shared 2-core machine are noisy: read the ratios, not the absolute times.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._measure import is_busy, load_line, load_now, median_of_runs, verdict

LAYERS = 4
COMPILE_SIZE, OTHER_SIZE = 4, 5
STEPS = 200
PROFILE_STEPS = 100
PROFILE_TOP = 8
PROFILED = ("eager", "level3_reference")
#: The reference pieces' decode step, at most this many times eager's (issue 22).
REFERENCE_STEP_TARGET = 1.5
SCENARIOS = (
    ("eager", 0, ""),
    ("level2_inductor", 2, "inductor"),
    ("level3_inductor", 3, "inductor_standalone"),
    ("level3_inductor_fx", 3, "inductor"),
    ("level3_reference", 3, "reference"),
)


def _child_main(ns: argparse.Namespace) -> int:
    imported = time.time()
    import torch

    import reference.atom as atom
    from conformance.models import atom_model as M

    torch.set_grad_enabled(False)
    # One intra-op thread: on a shared machine a second spinning thread makes step times bimodal.
    torch.set_num_threads(1)
    config = atom.Config(
        max_num_seqs=8,
        compilation_config=atom.CompilationConfig(
            level=ns.level, cudagraph_capture_sizes=[1, 2, 4, 8], compile_sizes=[COMPILE_SIZE],
            use_inductor=ns.compiler != "reference", piece_compiler=ns.compiler if ns.level == 3 else "",
            cache_dir=ns.cache_dir,
        ),
    )
    model = M.build_decoder(atom, config, layers=LAYERS)
    runner = atom.compile_model(model, config)
    before = atom.COUNTERS.snapshot()
    start = time.perf_counter()
    first = runner(M.inputs(OTHER_SIZE))
    first_call_s = time.perf_counter() - start
    first_output = time.time()
    err = (first - M.eager_reference(model, M.inputs(OTHER_SIZE))).abs().max().item()
    steady = {}
    for size in (COMPILE_SIZE, OTHER_SIZE):
        x = M.inputs(size)
        for _ in range(5):  # warm-up; the specialised size compiles here
            runner(x)
        times = []
        for _ in range(STEPS):
            t = time.perf_counter()
            runner(x)
            times.append(time.perf_counter() - t)
        steady[str(size)] = statistics.median(times) * 1e3
    profile = _profile(runner, M.inputs(COMPILE_SIZE)) if ns.profile else []
    result = {
        "first_call_s": first_call_s,
        "first_output_epoch": first_output,
        "imported_epoch": imported,
        "steady_ms": steady,
        "max_abs_error_vs_eager": err,
        "counters": atom.COUNTERS.delta(before).as_dict(),
        "profile": profile,
    }
    Path(ns.out).write_text(json.dumps(result))
    return 0


def _profile(runner, x) -> list[dict]:
    """The functions that take the most time of their own over ``PROFILE_STEPS`` steps, per step."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(PROFILE_STEPS):
        runner(x)
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # (file, line, name) -> (primitive calls, calls, tottime, cumtime, callers)
    rows = sorted(stats.items(), key=lambda kv: kv[1][2], reverse=True)[:PROFILE_TOP]
    root = str(Path(__file__).resolve().parent.parent) + os.sep
    out = []
    for (file, line, name), (_, calls, tottime, cumtime, _) in rows:
        where = file.replace(root, "").split("site-packages" + os.sep)[-1]
        out.append({
            "function": f"{name} ({where}:{line})" if line else name,
            "calls_per_step": calls / PROFILE_STEPS,
            "own_us_per_step": tottime / PROFILE_STEPS * 1e6,
            "cumulative_us_per_step": cumtime / PROFILE_STEPS * 1e6,
        })
    return out


def _spawn(name: str, level: int, compiler: str, caches: Path, tag: str, tmp: Path) -> dict:
    out = tmp / f"{name}_{tag}.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in [os.getcwd(), *sys.path] if p),
        "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"),
        "TORCH_NEURONX_NEFF_CACHE_DIR": str(caches / "neff"),
        "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR": str(caches / "local"),
        "TORCH_NEURONX_HLO_CACHE_DIR": str(caches / "hlo"),
    }
    cmd = [sys.executable, "-m", "benchmarks.bench_atom", "--child", "--level", str(level), "--compiler", compiler,
           "--cache-dir", str(caches / "atom"), "--out", str(out)]
    if tag == "cold" and name in PROFILED:
        cmd.append("--profile")
    load_before = load_now()
    spawned = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    load_after = load_now()
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"{name} ({tag}) failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    data = json.loads(out.read_text())
    data["spawn_to_first_output_s"] = data.pop("first_output_epoch") - spawned
    data.pop("imported_epoch")
    data["load_before"], data["load_after"] = load_before, load_after
    return data


def _one_run() -> dict:
    rows = {}
    with tempfile.TemporaryDirectory(prefix="bench_atom_") as tmp_name:
        tmp = Path(tmp_name)
        for name, level, compiler in SCENARIOS:
            caches = tmp / name
            rows[name] = {"cold": _spawn(name, level, compiler, caches, "cold", tmp)}
            if level == 3:
                rows[name]["warm"] = _spawn(name, level, compiler, caches, "warm", tmp)
    return rows


def run(out_dir: Path, repeat: int = 1) -> dict:
    """``repeat`` runs of every scenario (fresh caches each time); each figure is the median."""
    load_before = os.getloadavg()[0]
    runs = [_one_run() for _ in range(repeat)]
    rows = median_of_runs(runs)
    load_after = os.getloadavg()[0]
    eager = rows["eager"]["cold"]["steady_ms"]
    for name, row in rows.items():
        cold = row["cold"]
        row["steady_vs_eager"] = {size: cold["steady_ms"][size] / eager[size] for size in eager}
        # Every process of every run: a busy one anywhere in the row makes the row's figures busy.
        row["loads"] = [r[name][tag][k] for r in runs for tag in ("cold", "warm") if tag in r[name]
                        for k in ("load_before", "load_after")]
        row["busy"] = is_busy(row["loads"])
        if "warm" in row:
            row["warm_vs_cold_first_call"] = row["warm"]["first_call_s"] / cold["first_call_s"]
    reference = rows["level3_reference"]
    # The ratio is taken against eager's step in the same run: both rows' loads count.
    step_loads = reference["loads"] + rows["eager"]["loads"]
    worst = max(reference["steady_vs_eager"].values())
    verdicts = {
        "reference_step_vs_eager": worst,
        "target": REFERENCE_STEP_TARGET,
        "verdict": verdict(worst, REFERENCE_STEP_TARGET, step_loads),
    }
    result = {
        "model": f"conformance/models/atom_model.py decoder, {LAYERS} layers, hidden 16",
        "load_1min_before": load_before,
        "load_1min_after": load_after,
        "cpu_count": os.cpu_count(),
        "torch_threads": 1,
        "repeat": repeat,
        "rows": rows,
        "verdicts": verdicts,
        "runs": runs if repeat > 1 else [],
    }
    result["table"] = _table(result)
    return result


def _table(result: dict) -> str:
    lines = [
        "# ATOM compilation benchmark",
        "",
        f"{result['model']}; median of {result['repeat']} run(s). "
        + load_line([result["load_1min_before"], result["load_1min_after"]])
        + " Compare ratios within this run; a row measured above the core count is marked busy.",
        "",
        "| scenario | cold first call (s) | warm first call (s) | warm spawn-to-output (s) | pieces compiled warm "
        f"| step @{COMPILE_SIZE} (ms) | step @{OTHER_SIZE} (ms) | vs eager @{COMPILE_SIZE} | vs eager @{OTHER_SIZE} "
        "| max err | load (1 min) | busy |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in result["rows"].items():
        cold, warm = row["cold"], row.get("warm")
        head = (
            f"| {name} | {cold['first_call_s']:.2f} | {warm['first_call_s']:.2f} | {warm['spawn_to_first_output_s']:.2f} | "
            f"{warm['counters']['num_backend_compilations']} | "
            if warm
            else f"| {name} | {cold['first_call_s']:.2f} | - | - | - | "
        )
        loads = row["loads"]
        lines.append(
            head + f"{cold['steady_ms'][str(COMPILE_SIZE)]:.3f} | {cold['steady_ms'][str(OTHER_SIZE)]:.3f} | "
            f"{row['steady_vs_eager'][str(COMPILE_SIZE)]:.2f} | {row['steady_vs_eager'][str(OTHER_SIZE)]:.2f} | "
            f"{cold['max_abs_error_vs_eager']:.1e} | {min(loads):.2f}-{max(loads):.2f} | {'busy' if row['busy'] else 'no'} |"
        )
    v = result["verdicts"]
    lines += [
        "",
        f"Reference pieces' decode step: {v['reference_step_vs_eager']:.2f}x eager (the larger of the two sizes); "
        f"target at most {v['target']}x: **{v['verdict']}**.",
    ]
    for name, row in result["rows"].items():
        profile = row["cold"].get("profile")
        if not profile:
            continue
        lines += [
            "",
            f"Profile of one {name} step @{COMPILE_SIZE} (cProfile over {PROFILE_STEPS} steps; own time, per step; "
            "profiling slows every call, compare rows with each other):",
            "",
            "| function | calls | own (us) | cumulative (us) |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| `{p['function']}` | {p['calls_per_step']:.0f} | {p['own_us_per_step']:.1f} | {p['cumulative_us_per_step']:.1f} |"
            for p in profile
        ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", action="store_true", required=True)
    parser.add_argument("--level", type=int, required=True)
    parser.add_argument("--compiler", default="")
    parser.add_argument("--cache-dir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--profile", action="store_true")
    raise SystemExit(_child_main(parser.parse_args()))
