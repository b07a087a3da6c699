"""Pipeline benchmark: the decoder fixture under ``backend="neuron"`` against its peers, same run.

Every figure comes from a fresh interpreter (``benchmarks/_pipeline_child.py``); each repetition
measures the reference and every peer back to back, and each figure is a ratio of two measurements
from the same repetition. Peers: torch eager, Inductor, and IREE-Turbine's ``turbine_cpu`` (the
closest real peer pipeline: Dynamo, then IREE on the CPU) when ``iree.turbine`` is installed.

- cold first output: empty artifact / Inductor caches, so Dynamo, lowering and the compiler all
  run; measured from the first call (``after import``) and from the process start (``from spawn``);
- warm first output: a second fresh process over the caches the cold one filled;
- steady-state decode step: the median of many decode steps after warm-up;
- the floor: ``import torch`` + a Dynamo trace of the same calls + one ``iree-compile`` of each
  lowered module (cold), or ``import torch`` + the trace (warm: a cache read is close to free);
- a ``cProfile`` of the reference's decode steps (top functions) in the report.

Targets: decode step <= 1.0x Inductor's step; cold first output <= 0.10x Inductor's cold; warm
first output <= 0.5x Inductor's warm. Figures taken on a busy machine get ``busy`` instead of a
verdict (see :mod:`benchmarks._measure`); nothing here asserts.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path

from benchmarks._measure import CPUS, child_json, fmt, is_busy, load_line, loads_of, summary, verdict

STEPS = 300
PROFILE_STEPS = 200
CHILD = "benchmarks._pipeline_child"


def _timed(mode: str, env: dict[str, str]) -> dict:
    r = child_json(CHILD, [mode, str(STEPS)], env)
    r["from_spawn_s"] = r["first_output_at"] - r["spawned_at"]
    r["import_s"] = r["imported_at"] - r["spawned_at"]
    return r


def _turbine_missing() -> str | None:
    if importlib.util.find_spec("iree") is None or importlib.util.find_spec("iree.turbine") is None:
        return "iree.turbine is not installed (pip install the project's 'turbine' extra to add this peer)"
    return None


def _repetition(tmp: str, rep: int, turbine: bool) -> dict:
    base = os.path.join(tmp, f"rep{rep}")
    neuron_env = {
        "TORCH_NEURONX_NEFF_CACHE_DIR": os.path.join(base, "neff"),
        "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR": os.path.join(base, "neff-local"),
        "TORCH_NEURONX_HLO_CACHE_DIR": os.path.join(base, "hlo"),
    }
    inductor_env = {"TORCHINDUCTOR_CACHE_DIR": os.path.join(base, "inductor"), "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
                    "TORCHINDUCTOR_AUTOGRAD_CACHE": "1"}
    runs = {
        "eager": _timed("eager", {}),
        "neuron_cold": _timed("neuron", neuron_env),
        "neuron_warm": _timed("neuron", neuron_env),
        "inductor_cold": _timed("inductor", inductor_env),
        "inductor_warm": _timed("inductor", inductor_env),
    }
    if turbine:
        # one fresh process per repetition: its first output is turbine_cpu's start as a user meets it
        runs["turbine_cpu"] = _timed("turbine_cpu", {})
    fl = child_json(CHILD, ["floor", "0"], neuron_env)
    fl["import_s"] = fl["imported_at"] - fl["spawned_at"]
    fl["compile_total_s"] = sum(fl["compile_s"])
    fl["cold_floor_s"] = fl["import_s"] + fl["trace_s"] + fl["compile_total_s"]
    fl["warm_floor_s"] = fl["import_s"] + fl["trace_s"]
    runs["floor"] = fl
    return runs


# figure -> (numerator run, its field, denominator run, its field, target or None)
FIGURES = {
    "decode_step_vs_inductor": ("neuron_warm", "decode_step_median_us", "inductor_warm", "decode_step_median_us", 1.0),
    "cold_first_output_vs_inductor": ("neuron_cold", "first_output_s", "inductor_cold", "first_output_s", 0.10),
    "cold_from_spawn_vs_inductor": ("neuron_cold", "from_spawn_s", "inductor_cold", "from_spawn_s", None),
    "warm_from_spawn_vs_inductor": ("neuron_warm", "from_spawn_s", "inductor_warm", "from_spawn_s", 0.5),
    "warm_first_output_vs_inductor": ("neuron_warm", "first_output_s", "inductor_warm", "first_output_s", None),
    "decode_step_vs_eager": ("neuron_warm", "decode_step_median_us", "eager", "decode_step_median_us", None),
    "inductor_decode_step_vs_eager": ("inductor_warm", "decode_step_median_us", "eager", "decode_step_median_us", None),
    "cold_from_spawn_vs_floor": ("neuron_cold", "from_spawn_s", "floor", "cold_floor_s", None),
    "warm_from_spawn_vs_floor": ("neuron_warm", "from_spawn_s", "floor", "warm_floor_s", None),
    "inductor_cold_from_spawn_vs_floor": ("inductor_cold", "from_spawn_s", "floor", "cold_floor_s", None),
    "decode_step_vs_turbine_cpu": ("neuron_warm", "decode_step_median_us", "turbine_cpu", "decode_step_median_us", None),
    "cold_from_spawn_vs_turbine_cpu": ("neuron_cold", "from_spawn_s", "turbine_cpu", "from_spawn_s", None),
}


def _profile_table(prof: dict) -> list[str]:
    lines = [
        f"## Decode-step profile (cProfile, {prof['steps']} steps after warm-up, warm caches)",
        "",
        f"Profiled time per step: {prof['profiled_us_per_step']:.0f} µs (cProfile's own overhead inflates it; "
        "read the shares, not the absolute figure).",
        "",
        "| function (by own time) | calls/step | own µs/step | cumulative µs/step |",
        "|---|---:|---:|---:|",
    ]
    for r in prof["by_own_time"][:15]:
        lines.append(f"| `{r['function']}` | {r['calls_per_step']:.1f} | {r['own_us_per_step']:.1f} | {r['cumulative_us_per_step']:.1f} |")
    lines += ["", "| function (by cumulative time) | calls/step | own µs/step | cumulative µs/step |", "|---|---:|---:|---:|"]
    for r in prof["by_cumulative_time"][:15]:
        lines.append(f"| `{r['function']}` | {r['calls_per_step']:.1f} | {r['own_us_per_step']:.1f} | {r['cumulative_us_per_step']:.1f} |")
    return lines


def run(out_dir: Path, repeat: int = 1) -> dict:
    turbine_skip = _turbine_missing()
    reps = []
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as tmp:
        for rep in range(repeat):
            reps.append(_repetition(tmp, rep, turbine_skip is None))
        profile = child_json(CHILD, ["profile", str(PROFILE_STEPS)], {
            "TORCH_NEURONX_NEFF_CACHE_DIR": os.path.join(tmp, "rep0", "neff"),
            "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR": os.path.join(tmp, "rep0", "neff-local"),
            "TORCH_NEURONX_HLO_CACHE_DIR": os.path.join(tmp, "rep0", "hlo"),
        })

    figures = {}
    for name, (num, nf, den, df, target) in FIGURES.items():
        if num not in reps[0] or den not in reps[0]:
            continue
        values = [r[num][nf] / r[den][df] for r in reps]
        loads = loads_of([r[num] for r in reps] + [r[den] for r in reps])
        s = summary(values)
        fig = {"ratio": s, "of": f"{num}.{nf} / {den}.{df}", "loads": loads, "busy": is_busy(loads)}
        if target is not None:
            fig["target_at_most"] = target
            fig["verdict"] = verdict(s["median"], target, loads)
        figures[name] = fig

    names = list(reps[0])
    raw = {}
    for name in names:
        fields = ("first_output_s", "from_spawn_s", "decode_step_median_us") if name != "floor" else (
            "import_s", "trace_s", "compile_total_s", "cold_floor_s", "warm_floor_s")
        raw[name] = {f: summary([r[name][f] for r in reps]) for f in fields}
    all_loads = loads_of([run for r in reps for run in r.values()]) + [profile["load_before"], profile["load_after"]]

    lines = [f"# Pipeline benchmark (decoder fixture), {repeat} repetition(s)", "", load_line(all_loads), ""]
    if turbine_skip:
        lines += [f"Peer turbine_cpu skipped: {turbine_skip}.", ""]
    lines += ["Figures are `median [min-max]` over the repetitions; every ratio divides two measurements of the same repetition.", "",
              "| run | first output after import (s) | first output from spawn (s) | decode step median (µs) |", "|---|---:|---:|---:|"]
    for name in names:
        if name == "floor":
            continue
        v = raw[name]
        lines.append(f"| {name} | {fmt(v['first_output_s'])} | {fmt(v['from_spawn_s'])} | {fmt(v['decode_step_median_us'], 1)} |")
    f = raw["floor"]
    lines += ["", "Floor (same model, same run): `import torch` "
              f"{fmt(f['import_s'])} s + Dynamo trace of both calls {fmt(f['trace_s'])} s + one `iree-compile` of each "
              f"of the {reps[0]['floor']['modules']} lowered modules {fmt(f['compile_total_s'])} s = cold floor "
              f"{fmt(f['cold_floor_s'])} s; warm floor (import + trace) {fmt(f['warm_floor_s'])} s.", ""]
    lines += ["| figure | ratio | target | verdict | load (min-max) |", "|---|---:|---:|---|---|"]
    for name, fig in figures.items():
        t = fig.get("target_at_most")
        lines.append(f"| {name} | {fmt(fig['ratio'])} | {'≤ %.2f' % t if t is not None else ''} | "
                     f"{fig.get('verdict', 'busy' if fig['busy'] else '')} | {min(fig['loads']):.2f}-{max(fig['loads']):.2f} |")
    lines += [""] + _profile_table(profile) + [""]
    return {
        "repeat": repeat, "cpu_count": CPUS, "steps": STEPS, "figures": figures, "raw": raw, "repetitions": reps,
        "profile": profile, "turbine_cpu_skipped": turbine_skip, "table": "\n".join(lines),
    }
