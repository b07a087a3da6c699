"""Grouped experts benchmark: a Mixtral decode step with the library's default experts, with and
without the backend's lowering of ``transformers::grouped_mm_fallback``.

The model is the model lane's ``mixtral_default_experts`` (``neuron_fixtures/hf_models.py``: 2
layers, 4 experts, top-2, built offline with seeded weights). On a CPU in float32 the library routes
its experts through its own custom op; the backend lowers it to one batched matmul over the rows'
gathered expert weights (``reference.lowering.decompositions.grouped_mm_rows``). Without that
lowering the op has no lowering and no decomposition, so the graph breaks at each of its calls
(two per layer) and the op runs eagerly in between. Per variant, in one process:

- ``eager``: the uncompiled forward;
- ``lowered``: compiled, the op lowered by the backend;
- ``broken``: compiled with the lowering removed (the op breaks the graph).

Each figure is the 10th percentile (and, in the JSON, the median) of the decode steps on a static
KV cache, after a prefill and one step that compile. The compiled variants are compiled one after
the other (Dynamo reset in between), each measured in rounds that alternate with eager, so load
drifts hit it and eager alike; the 1-minute load average is recorded before and after.
Nothing here asserts.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from pathlib import Path

import torch

from benchmarks._measure import load_line

STEPS = 20
ROUNDS = 3
MODEL = "mixtral_default_experts"


@contextlib.contextmanager
def _without_library_lowerings():
    from reference.lowering import decompositions
    from reference.lowering.op_decisions import DECISIONS

    saved = dict(decompositions.LIBRARY_LOWERINGS)
    decompositions.LIBRARY_LOWERINGS.clear()
    DECISIONS.clear()
    try:
        yield
    finally:
        decompositions.LIBRARY_LOWERINGS.update(saved)
        DECISIONS.clear()


class _Decoder:
    """One variant: its forward on its own static cache, prefilled, ready for decode steps."""

    def __init__(self, variant: str, cache_len: int) -> None:
        import reference
        from neuron_fixtures import hf_models as hf
        from torch._dynamo.utils import counters

        spec = hf.BY_NAME[MODEL]
        self.net, ids = spec.build(), spec.inputs()["input_ids"]
        # every step writes the next cache row, whatever its cache_position: room for all of them
        self.cache = hf.static_cache(self.net, max_cache_len=cache_len)
        self.n = ids.shape[1]
        self.breaks: list[str] = []
        if variant == "eager":
            self.forward = self.net.forward
        else:
            # Dynamo would serve one variant's compiled frames to the other (a model instance of the
            # same structure passes the same guards): each compiled variant starts from a reset
            torch._dynamo.reset()
            counters["graph_break"].clear()
            reference.reset_dynamo_metrics()
            self.forward = torch.compile(self.net.forward, backend="neuron")
        start = time.perf_counter()
        with torch.no_grad():
            out = self.forward(input_ids=ids, past_key_values=self.cache, cache_position=torch.arange(self.n),
                               use_cache=True)
            self.token = out.logits[:, -1:].argmax(-1)
            self.step()
        self.first_s = time.perf_counter() - start
        if variant != "eager":
            self.graphs = len(reference.get_dynamo_metrics())
            self.breaks = sorted({str(r).split("op=")[1].split(" ")[0] for r in counters["graph_break"] if "op=" in str(r)})

    def step(self) -> None:
        with torch.no_grad():
            self.forward(input_ids=self.token, past_key_values=self.cache, cache_position=torch.tensor([self.n]),
                         use_cache=True)


def _time_us(decoder: _Decoder, steps: int) -> list[float]:
    samples = []
    for _ in range(steps):
        t = time.perf_counter_ns()
        decoder.step()
        samples.append((time.perf_counter_ns() - t) / 1e3)
    return samples


def run(out_dir: Path, repeat: int = 1) -> dict:
    load_before = os.getloadavg()[0]
    cache_len = 16 + 2 * ROUNDS * repeat * STEPS  # the prompt, the compiling step and every timed step
    eager = _Decoder("eager", cache_len)
    decoders = {"eager": eager}
    samples: dict[str, list[float]] = {"eager": [], "lowered": [], "broken": []}
    # One compiled variant at a time (each compile starts from a Dynamo reset), measured in rounds
    # alternating with eager, so each compares with eager under the same load.
    for name in ("lowered", "broken"):
        with _without_library_lowerings() if name == "broken" else contextlib.nullcontext():
            decoders[name] = compiled = _Decoder(name, cache_len)
            for _ in range(ROUNDS * repeat):
                samples["eager"] += _time_us(eager, STEPS)
                samples[name] += _time_us(compiled, STEPS)
    load_after = os.getloadavg()[0]
    p10 = {k: statistics.quantiles(v, n=10)[0] for k, v in samples.items()}
    median = {k: statistics.median(v) for k, v in samples.items()}
    lines = [
        f"# Grouped experts: one {MODEL} decode step (µs, 10th percentile)",
        "",
        load_line([load_before, load_after]),
        "",
        f"{STEPS * ROUNDS * repeat} steps per compiled variant, twice as many eager; medians in the JSON.",
        "",
        "| variant | step (µs) | / lowered | graphs (prefill + first step) | graph breaks at | first calls (s) |",
        "|---|---:|---:|---:|---|---:|",
    ]
    for name, d in decoders.items():
        graphs = getattr(d, "graphs", None)
        lines.append(f"| {name} | {p10[name]:.0f} | {p10[name] / p10['lowered']:.2f} | "
                     f"{'-' if graphs is None else graphs} | {', '.join(d.breaks) or '-'} | {d.first_s:.1f} |")
    return {
        "load_1min_before": load_before,
        "load_1min_after": load_after,
        "steps": STEPS * ROUNDS * repeat,
        "p10_us": p10,
        "median_us": median,
        "graphs": {k: getattr(d, "graphs", None) for k, d in decoders.items()},
        "breaks": {k: d.breaks for k, d in decoders.items()},
        "table": "\n".join(lines) + "\n",
    }
