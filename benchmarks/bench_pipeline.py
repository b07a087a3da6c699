"""Pipeline benchmark: the decoder fixture under ``backend="neuron"`` against torch eager and Inductor.

Every figure comes from a fresh interpreter (``benchmarks/_pipeline_child.py``), all in the same
run, so the ratios compare like with like on whatever machine runs them:

- cold first output: empty artifact / Inductor caches, so Dynamo, lowering and the compiler all run;
- warm first output: a second fresh process over the caches the cold one filled;
- steady-state decode step: the median of many decode steps after warm-up.

Targets (from the foundation issue): neuron's cold first output at most 0.25x Inductor's, and its
decode step at most 1.2x eager's. The report says whether each was met; nothing here asserts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

STEPS = 300
ROOT = Path(__file__).resolve().parent.parent


def _child(backend: str, env_extra: dict[str, str]) -> dict:
    env = dict(os.environ)
    env.update(env_extra)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks._pipeline_child", backend, str(STEPS)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{backend} child failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(out_dir: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as tmp:
        neuron_env = {
            "TORCH_NEURONX_NEFF_CACHE_DIR": os.path.join(tmp, "neff"),
            "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR": os.path.join(tmp, "neff-local"),
            "TORCH_NEURONX_HLO_CACHE_DIR": os.path.join(tmp, "hlo"),
        }
        inductor_env = {"TORCHINDUCTOR_CACHE_DIR": os.path.join(tmp, "inductor"), "TORCHINDUCTOR_FX_GRAPH_CACHE": "1"}
        eager = _child("eager", {})
        neuron_cold = _child("neuron", neuron_env)
        neuron_warm = _child("neuron", neuron_env)
        inductor_cold = _child("inductor", inductor_env)
        inductor_warm = _child("inductor", inductor_env)

    ratios = {
        "neuron_cold_vs_inductor_cold": neuron_cold["first_output_s"] / inductor_cold["first_output_s"],
        "neuron_warm_vs_inductor_warm": neuron_warm["first_output_s"] / inductor_warm["first_output_s"],
        "neuron_warm_vs_neuron_cold": neuron_warm["first_output_s"] / neuron_cold["first_output_s"],
        "neuron_decode_vs_eager": neuron_warm["decode_step_median_us"] / eager["decode_step_median_us"],
        "inductor_decode_vs_eager": inductor_warm["decode_step_median_us"] / eager["decode_step_median_us"],
    }
    targets = {
        "neuron_cold_vs_inductor_cold": {"at_most": 0.25, "met": ratios["neuron_cold_vs_inductor_cold"] <= 0.25},
        "neuron_decode_vs_eager": {"at_most": 1.2, "met": ratios["neuron_decode_vs_eager"] <= 1.2},
    }
    runs = {
        "eager": eager,
        "neuron_cold": neuron_cold,
        "neuron_warm": neuron_warm,
        "inductor_cold": inductor_cold,
        "inductor_warm": inductor_warm,
    }
    rows = [
        "| run | first output (s) | decode step median (µs) | decode p90 (µs) |",
        "|---|---:|---:|---:|",
    ]
    for name, r in runs.items():
        rows.append(f"| {name} | {r['first_output_s']:.3f} | {r['decode_step_median_us']:.1f} | {r['decode_step_p90_us']:.1f} |")
    rows += ["", "| ratio | value | target | met |", "|---|---:|---:|---|"]
    for name, value in ratios.items():
        t = targets.get(name)
        rows.append(f"| {name} | {value:.3f} | {'≤ %.2f' % t['at_most'] if t else ''} | {('yes' if t['met'] else 'NO') if t else ''} |")
    table = "# Pipeline benchmark (decoder fixture)\n\n" + "\n".join(rows) + "\n"
    return {"runs": runs, "ratios": ratios, "targets": targets, "steps": STEPS, "table": table}
