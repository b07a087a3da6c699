"""Inference plans against torch's own paths: is the plan cache worth the AOT Autograd state it reads?

The decoder fixture under ``backend="neuron"``, each figure from a fresh interpreter
(``python -m benchmarks.bench_plans MODE STEPS BLOB`` is the child), in three modes:

- ``plans``: the reference as it ships. A warm start finds each graph's inference plan and serves
  it from the HLO and NEFF caches without AOT Autograd's trace; each call is the runtime call plus
  the copy of mutated inputs (:mod:`reference.backends.inference_plan`).
- ``no_plans``: the plans turned off in the child (``plan_key`` and ``plan_for`` answer "no plan"),
  with torch's AOTAutogradCache on (``TORCHINDUCTOR_AUTOGRAD_CACHE=1``): every start traces each
  graph through AOT Autograd (its key then hits the HLO and NEFF caches), every call goes through
  AOT Autograd's runtime wrapper. The child reports AOT Autograd's own cache counters, so the
  table shows whether torch's cache serves this backend at all.
- ``precompile``: the plans off, torch's precompile path on (``TORCH_CACHING_PRECOMPILE=1``): the
  cold process saves ``torch.compiler.save_cache_artifacts()``, the warm one loads them before it
  compiles, so Dynamo's trace is skipped too and each graph is rebuilt from the backend's artifact.

Each repetition runs one cold start per cache set, then the warm starts back to back (their order
alternates between repetitions). Figures: the warm first output (a prefill at the first bucket,
then one decode step, from the first call) and the median decode step over ``STEPS`` steps. The
private AOT state each mode's own code reads is counted two ways: the AOT Autograd metadata fields
the plan maker reads per graph (at run time, through a recording proxy), and the private torch
names ``reference/backends/inference_plan.py`` takes from the compat module (statically).

The rule the plans are kept by: ``no_plans_vs_plans`` of the warm first output at 1.2 or more in
every repetition (the plans must save a fifth of a warm start to pay for the AOT state they read);
the decode step is reported beside it and must not be slower with the plans (ratio at least 0.95).

Nothing here asserts; figures taken on a busy machine are labelled so (:mod:`benchmarks._measure`).
"""

from __future__ import annotations

import ast
import json
import os
import sys
import tempfile
from pathlib import Path

from benchmarks._measure import ROOT, child_json, fmt, is_busy, load_line, loads_of, summary, time_first_output_and_steps

STEPS = 300
CHILD = "benchmarks.bench_plans"
MODES = ("plans", "no_plans", "precompile")


# --- the child ----------------------------------------------------------------------------------


class _Recording:
    """A read-only view of an object that records the attribute paths read through it."""

    def __init__(self, obj, path: str, seen: set[str]) -> None:
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_seen", seen)

    def __getattr__(self, name: str):
        path = f"{self._path}.{name}"
        self._seen.add(path)
        value = getattr(self._obj, name)
        if isinstance(value, (list, tuple)):
            return type(value)(_Recording(v, f"{path}[]", self._seen) if _recordable(v) else v for v in value)
        return value

    def __len__(self):
        return len(self._obj)


def _recordable(v) -> bool:
    return not isinstance(v, (int, float, str, bool, type(None)))


def _child(mode: str, steps: int, blob: str) -> dict:
    import torch
    from torch._dynamo.utils import counters

    from reference.backends import inference_plan
    from reference.core import torch_compat
    from reference.core.metrics import METRICS

    fields: set[str] = set()
    graphs_planned = [0]
    if mode == "plans":
        read = torch_compat.aot_forward_metadata  # what aot_inference_facts reads the metadata through

        def recording():
            meta = read()
            graphs_planned[0] += 1
            return None if meta is None else _Recording(meta, "fw_metadata", fields)

        torch_compat.aot_forward_metadata = recording
    else:  # torch's own paths: no plan is looked up or made
        inference_plan.plan_key = lambda *a, **k: None
        inference_plan.plan_for = lambda *a, **k: None
    loaded = False
    if mode == "precompile" and os.path.exists(blob):
        torch.compiler.load_cache_artifacts(Path(blob).read_bytes())
        loaded = True

    from neuron_fixtures import DECODER_PREFILL_BUCKETS, decoder_decode_inputs, decoder_model, decoder_prefill_inputs

    torch.manual_seed(0)
    model = decoder_model().eval()
    prefill, decode = decoder_prefill_inputs(model, DECODER_PREFILL_BUCKETS[0]), decoder_decode_inputs(model)
    fn = torch.compile(model, backend="neuron", dynamic=False)
    with torch.no_grad():
        times = time_first_output_and_steps(fn, prefill, decode, steps)
    if mode == "precompile" and not loaded:
        Path(blob).write_bytes(torch.compiler.save_cache_artifacts()[0])
    c = METRICS.counters()
    return {
        "mode": mode,
        "first_output_s": times.first_output_s,
        "decode_step_median_us": times.step_median_us,
        "compiled": c.get("compiler_invocations", 0),
        "plan_hits": c.get("plan_cache_hits", 0),
        "aot_cache": {k: v for k, v in counters["aot_autograd"].items() if "autograd_cache" in k},
        "dynamo_graphs": counters["stats"].get("unique_graphs", 0),
        "loaded_precompile": loaded,
        "aot_fields_read": sorted(fields),
        "graphs_planned": graphs_planned[0],
        "logits_checksum": float(times.out.double().sum()),
    }


# --- the parent ---------------------------------------------------------------------------------


def private_names_read_by_the_plans() -> list[str]:
    """The names ``reference/backends/inference_plan.py`` imports from the torch-compat module (the
    metadata fields behind ``aot_inference_facts`` are counted at run time)."""
    tree = ast.parse((ROOT / "reference" / "backends" / "inference_plan.py").read_text())
    return sorted(
        a.name for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "reference.core.torch_compat" for a in node.names
    )


def _env(base: str, mode: str) -> dict[str, str]:
    env = {
        "TORCH_NEURONX_NEFF_CACHE_DIR": os.path.join(base, "neff"),
        "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR": os.path.join(base, "neff-local"),
        "TORCH_NEURONX_HLO_CACHE_DIR": os.path.join(base, "hlo"),
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(base, "inductor"),
        "TORCHINDUCTOR_AUTOGRAD_CACHE": "1",
    }
    if mode == "precompile":
        env["TORCH_CACHING_PRECOMPILE"] = "1"
    return env


def _repetition(tmp: str, rep: int) -> dict:
    shared = os.path.join(tmp, f"rep{rep}", "shared")  # plans and no_plans: one set of caches
    own = os.path.join(tmp, f"rep{rep}", "precompile")
    blob = os.path.join(own, "artifacts.bin")
    os.makedirs(own, exist_ok=True)
    runs = {
        "plans_cold": child_json(CHILD, ["plans", str(STEPS), blob], _env(shared, "plans")),
        "precompile_cold": child_json(CHILD, ["precompile", str(STEPS), blob], _env(own, "precompile")),
    }
    order = MODES if rep % 2 == 0 else tuple(reversed(MODES))
    for mode in order:
        base = own if mode == "precompile" else shared
        runs[f"{mode}_warm"] = child_json(CHILD, [mode, str(STEPS), blob], _env(base, mode))
    return runs


def run(out_dir: Path, repeat: int = 1) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-plans-") as tmp:
        reps = [_repetition(tmp, rep) for rep in range(repeat)]
    loads = loads_of([r for rep in reps for r in rep.values()])
    figures = {}
    for mode in MODES:
        runs = [rep[f"{mode}_warm"] for rep in reps]
        figures[mode] = {
            "warm_first_output_s": summary([r["first_output_s"] for r in runs]),
            "decode_step_us": summary([r["decode_step_median_us"] for r in runs]),
            "compiled_warm": runs[0]["compiled"],
            "plan_hits_warm": runs[0]["plan_hits"],
            "aot_cache_warm": runs[0]["aot_cache"],
            "dynamo_graphs_warm": runs[0]["dynamo_graphs"],
        }
    ratios = {
        f"{mode}_vs_plans": {
            "warm_first_output": summary([rep[f"{mode}_warm"]["first_output_s"] / rep["plans_warm"]["first_output_s"] for rep in reps]),
            "decode_step": summary([rep[f"{mode}_warm"]["decode_step_median_us"] / rep["plans_warm"]["decode_step_median_us"]
                                    for rep in reps]),
        }
        for mode in MODES if mode != "plans"
    }
    fields = reps[0]["plans_cold"]["aot_fields_read"]
    names = private_names_read_by_the_plans()
    checksums = {k: r["logits_checksum"] for k, r in reps[0].items()}
    lines = [
        "# Inference plans vs torch's own paths (decoder fixture, backend=\"neuron\")",
        "",
        load_line(loads),
        "",
        "| mode (warm start) | first output s | decode step µs | compiles | plan hits | AOT cache (torch) | Dynamo graphs |",
        "|---|---:|---:|---:|---:|---|---:|",
    ]
    for mode in MODES:
        f = figures[mode]
        aot = ", ".join(f"{k.removeprefix('autograd_cache_')}={v}" for k, v in sorted(f["aot_cache_warm"].items())) or "-"
        lines.append(f"| {mode} | {fmt(f['warm_first_output_s'])} | {fmt(f['decode_step_us'], 1)} | {f['compiled_warm']} | "
                     f"{f['plan_hits_warm']} | {aot} | {f['dynamo_graphs_warm']} |")
    lines += ["", "| ratio to plans (same repetition) | warm first output | decode step |", "|---|---:|---:|"]
    for name, r in ratios.items():
        lines.append(f"| {name} | {fmt(r['warm_first_output'])} | {fmt(r['decode_step'])} |")
    lines += [
        "",
        f"Private AOT state the plans read: {len(fields)} fields of AOT Autograd's metadata per graph "
        f"({reps[0]['plans_cold']['graphs_planned']} graphs planned on the cold start): " + ", ".join(f"`{x}`" for x in fields) + ".",
        f"Private torch names inference_plan.py takes from the compat module: {len(names)} (" + ", ".join(f"`{n}`" for n in names) + ").",
        "The no_plans and precompile modes read none of AOT Autograd's metadata in the reference's code.",
        "",
        f"Same logits in every run: {len(set(round(v, 6) for v in checksums.values())) == 1}.",
        "",
    ]
    return {"runs": reps, "figures": figures, "ratios": ratios, "aot_fields_read": fields,
            "private_names": names, "busy": is_busy(loads), "table": "\n".join(lines)}


if __name__ == "__main__":
    print(json.dumps(_child(sys.argv[1], int(sys.argv[2]), sys.argv[3])))
