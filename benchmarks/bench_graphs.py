"""Graph-capture benchmark: one decode step replayed from a recording, against the same step run
compiled without graphs and run eagerly, per batch bucket, all in one process and one run.

The model is the graph-capture contract's tiny decoder (``conformance/models/atom_graph_model.py``): a
backbone compiled in pieces around an eager-region attention, then an LM head. Per compile backend
(the reference's ``neuron`` and Inductor) and per bucket:

- ``eager``: the uncompiled forward;
- ``compiled``: the compiled model called through Dynamo, no graph (an ``enforce_eager`` runner);
- ``full``: the FULL request graph replayed;
- ``tr_hybrid``: the TR_HYBRID token graph replayed (attention live between the recorded pieces).

Each figure is the 10th percentile (and, in the JSON, the median) of ``STEPS`` steps (inputs copied in, logits out), the variants measured
in turn within each round so that load drifts hit them alike. On the CPU a replay saves Dynamo's
guard evaluation and the Python glue between pieces; on CUDA it would also save the kernel
launches. The machine load (1-minute average) is recorded before and after: figures on a shared
machine are noisy, ratios less so. Nothing here asserts.
"""

from __future__ import annotations

import os
import statistics
import time
import types
from pathlib import Path

import torch

from conformance.models import atom_graph_model as G
from reference.atom import config as atom_config
from reference.atom import forward_context, model_runner, recorder, region_graph
from reference.atom.graph_mode import CUDAGraphMode

from benchmarks._measure import load_line, median_of_runs

BUCKETS = (1, 2, 4, 8)
STEPS = 200
ROUNDS = 5
BACKENDS = ("neuron", "inductor")

ATOM = types.SimpleNamespace(
    CompilationConfig=atom_config.CompilationConfig,
    Config=atom_config.Config,
    **{n: getattr(m, n) for m in (forward_context, recorder, region_graph, model_runner) for n in m.__all__},
)


def _median_us(fn, steps: int) -> list[float]:
    samples = []
    for _ in range(steps):
        t = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t) / 1e3)
    return samples


def _bench_backend(backend: str) -> dict:
    torch._dynamo.reset()
    model = G.compiled_decoder(ATOM, backend)
    cache = G.kv_cache(ATOM)
    runners = {
        "compiled": G.make_runner(ATOM, model, CUDAGraphMode.NONE, sizes=BUCKETS, cache=cache, enforce_eager=True),
        "full": G.make_runner(ATOM, model, CUDAGraphMode.FULL, sizes=BUCKETS, cache=cache, progress=open(os.devnull, "w")),
        "tr_hybrid": G.make_runner(ATOM, model, CUDAGraphMode.TR_HYBRID, sizes=BUCKETS, cache=cache, progress=open(os.devnull, "w")),
    }
    t = time.perf_counter()
    with torch.no_grad():
        capture_s = {name: r.capture_cudagraph()[0] for name, r in runners.items() if name != "compiled"}
    setup_s = time.perf_counter() - t
    rows, fast = {}, {}
    with torch.no_grad():
        for bs in BUCKETS:
            step = G.decode_step(bs, seed=bs)
            variants = {"eager": lambda: G.eager_logits(ATOM, model, cache, step)}
            variants.update({name: (lambda r=r: r.execute(*step)) for name, r in runners.items()})
            for fn in variants.values():  # warm: the compiled path compiles this shape here if needed
                fn()
            samples: dict[str, list[float]] = {name: [] for name in variants}
            for _ in range(ROUNDS):
                for name, fn in variants.items():
                    samples[name] += _median_us(fn, STEPS // ROUNDS)
            rows[bs] = {name: statistics.median(s) for name, s in samples.items()}
            fast[bs] = {name: statistics.quantiles(s, n=10)[0] for name, s in samples.items()}
    counters = {name: (r.counters.replays, r.counters.eager) for name, r in runners.items()}
    return {"setup_s": setup_s, "capture_s": capture_s, "median_us": rows, "p10_us": fast, "counters": counters}


def run(out_dir: Path, repeat: int = 1) -> dict:
    """``repeat`` runs per backend (each compiles and captures anew); each figure is the median."""
    load_before = os.getloadavg()[0]
    results = {b: median_of_runs([_bench_backend(b) for _ in range(repeat)]) for b in BACKENDS}
    load_after = os.getloadavg()[0]
    lines = [
        "# Graph capture: decode step per bucket (µs, 10th percentile; ratios against the same run)",
        "",
        load_line([load_before, load_after]),
        "",
        f"{STEPS} steps per figure, median of {repeat} run(s). The 10th percentile stands for the",
        "uncontended step on a shared machine; medians are in the JSON.",
        "",
        "| backend | bucket | eager | compiled | FULL replay | TR_HYBRID replay | FULL / compiled | TR / compiled | TR / eager |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for backend, res in results.items():
        for bs, m in res["p10_us"].items():
            lines.append(
                f"| {backend} | {bs} | {m['eager']:.1f} | {m['compiled']:.1f} | {m['full']:.1f} | {m['tr_hybrid']:.1f} "
                f"| {m['full'] / m['compiled']:.2f} | {m['tr_hybrid'] / m['compiled']:.2f} | {m['tr_hybrid'] / m['eager']:.2f} |"
            )
    lines.append("")
    for backend, res in results.items():
        caps = ", ".join(f"{k} {v:.1f} s" for k, v in res["capture_s"].items())
        lines.append(f"- {backend}: capture (includes compiling each bucket) {caps}")
    return {
        "load_1min_before": load_before,
        "load_1min_after": load_after,
        "steps": STEPS,
        "buckets": list(BUCKETS),
        "results": {
            b: {**r, **{key: {str(k): v for k, v in r[key].items()} for key in ("median_us", "p10_us")}}
            for b, r in results.items()
        },
        "table": "\n".join(lines) + "\n",
    }
