"""The runner's decode step against its floor: ``ModelRunner.execute``, the eager step, and a raw
graph replay of the same step, per graph mode and batch size, with the runner's host work split.

The model is the production-shaped decoder of the ATOM matrix (``conformance/models/atom_graph_model.py``)
at level 3 with Inductor pieces. Per mode (FULL, FULL_DECODE_ONLY, TR_HYBRID, FULL_AND_TR_HYBRID)
and per batch size:

- ``runner``: one ``execute(...)`` step (inputs in, logits out);
- ``eager``: the uncompiled forward and the LM head under a forward context;
- ``raw replay`` (CUDA only): one ``torch.cuda.CUDAGraph`` of the whole step (forward and LM
  head), captured directly under a fixed forward context and replayed with nothing around it:
  the floor the runner's host work sits on. On the CPU there is no such floor (a CPU "replay" is
  the launches themselves), so the row says "no GPU".

The runner's host work is split by timing its parts one by one on the same step: deciding the path
(``decide``), padding and writing the step into its buffers (``stage``), building the metadata
(``metadata``), setting and resetting the forward context (``context``); ``replay + logits`` is the
rest of the step. Every CUDA figure synchronizes the device after the step. The machine load is
recorded before and after. Nothing here asserts.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks._measure import load_line

MODES = ("FULL", "FULL_DECODE_ONLY", "TR_HYBRID", "FULL_AND_TR_HYBRID")
SIZES = (1, 2, 4)
STEPS = 200


def _us(fn, steps: int, sync) -> float:
    """Median microseconds of ``fn`` over ``steps`` calls (each followed by ``sync``)."""
    samples = []
    for _ in range(steps):
        t = time.perf_counter_ns()
        fn()
        sync()
        samples.append((time.perf_counter_ns() - t) / 1e3)
    return statistics.median(samples)


def _raw_replay(atom, model, cache, step, device) -> float | None:
    """Microseconds of one replay of the whole step captured directly, or ``None`` off CUDA."""
    if device != "cuda":
        return None
    from conformance.models import atom_graph_model as G

    ids, pos, lens = step
    attn = atom.AttentionMetaData(max_seqlen_q=1, max_seqlen_k=G.MAX_LEN, context_lens=lens)
    ctx = atom.Context(positions=pos, batch_size=len(lens), running_bs=len(lens), running_tokens=len(ids))
    forward = type(model.model).forward
    with atom.in_forward_context(attn, None, ctx, kv_cache_data=cache):
        for _ in range(3):  # warm-up on a side stream, as CUDA graph capture asks
            model.compute_logits(forward(model.model, ids, pos))
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            model.compute_logits(forward(model.model, ids, pos))
    return _us(graph.replay, STEPS, torch.cuda.synchronize)


def _host_split(runner, step, sync) -> dict[str, float]:
    """The runner's host parts for ``step``, each timed alone (microseconds, medians)."""
    from reference.atom.forward_context import in_forward_context

    ids, pos, lens = step
    bs, rows = len(lens), len(ids)
    mode = runner.decide(bs, rows, is_prefill=False)
    pad = mode.running_tokens - rows if mode.replays else 0

    def stage():
        i, p, c = ids, pos, lens
        if pad:
            i = torch.cat([i, i.new_zeros(pad)])
            p = torch.cat([p, p.new_zeros(pad)])
            c = torch.cat([c, c.new_zeros(mode.running_bs - bs)])
        return runner._stage(i, p, c) if mode.replays else (i, p, c)

    staged = stage()
    attn, context = runner._decode_metadata(mode.running_bs, staged[2], staged[1], int(lens.max()), static=mode.replays)

    def ctx():
        with in_forward_context(attn, runner.config, context, kv_cache_data=runner.kv_cache_data, forward_mode=mode):
            pass

    none = lambda: None  # noqa: E731
    return {
        "decide": _us(lambda: runner.decide(bs, rows, is_prefill=False), STEPS, none),
        "stage": _us(stage, STEPS, sync),
        "metadata": _us(lambda: runner._decode_metadata(mode.running_bs, staged[2], staged[1], int(lens.max()), static=mode.replays), STEPS, sync),
        "context": _us(ctx, STEPS, none),
    }


def _bench(device: str) -> dict:
    import reference.atom as atom
    from conformance.models import atom_graph_model as G

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    torch._dynamo.reset()
    root = tempfile.mkdtemp(prefix="bench_runner_step_")
    model = G.build_production_decoder(atom, G.production_config(atom, 3, "NONE", cache_dir=root, sizes=SIZES)).to(device)
    cache = G.production_kv_cache(atom, device=device)
    rows = []
    with torch.no_grad():
        for mode in MODES:
            config = G.production_config(atom, 3, mode, cache_dir=root, sizes=SIZES)
            runner = atom.ModelRunner(model, config, device=device, kv_cache_data=cache, max_model_len=G.MAX_LEN, progress=open(os.devnull, "w"))
            runner.capture_cudagraph()
            for bs in SIZES:
                step = G.decode_step(bs, seed=200 + bs, device=device)
                runner.execute(*step)  # warm
                got = _us(lambda: runner.execute(*step), STEPS, sync)
                eager = _us(lambda: G.eager_step_logits(atom, model, cache, *step), STEPS, sync)
                raw = _raw_replay(atom, model, cache, step, device) if mode == MODES[0] else rows[SIZES.index(bs)]["raw_us"]
                split = _host_split(runner, step, sync)
                split["replay + logits"] = max(0.0, got - sum(split.values()))
                rows.append({"mode": mode, "batch_size": bs, "runner_us": got, "eager_us": eager, "raw_us": raw,
                             "path": runner.last_step.path, "split_us": split})
    return {"device": device, "rows": rows}


def run(out_dir: Path, repeat: int = 1) -> dict:
    """One run on CUDA when a GPU is present, else on the CPU (no raw-replay floor there)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    load_before = os.getloadavg()[0]
    result = _bench(device)
    load_after = os.getloadavg()[0]
    where = torch.cuda.get_device_name(0) if device == "cuda" else "CPU (no GPU: the raw-replay floor is a GPU figure)"
    lines = [
        "# Runner decode step against its floor (µs, medians; level 3, Inductor pieces, production-shaped decoder)",
        "",
        f"Device: {where}. {load_line([load_before, load_after])}",
        "",
        "| mode | bs | path | runner | eager | raw replay | runner / raw | decide | stage | metadata | context | replay + logits |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        s = r["split_us"]
        raw = "no GPU" if r["raw_us"] is None else f"{r['raw_us']:.1f}"
        ratio = "no GPU" if r["raw_us"] is None else f"{r['runner_us'] / r['raw_us']:.2f}"
        lines.append(
            f"| {r['mode']} | {r['batch_size']} | {r['path']} | {r['runner_us']:.1f} | {r['eager_us']:.1f} | {raw} | {ratio} "
            f"| {s['decide']:.1f} | {s['stage']:.1f} | {s['metadata']:.1f} | {s['context']:.1f} | {s['replay + logits']:.1f} |"
        )
    lines += ["", "Target on a GPU: runner / raw at most 2.00 (the host work a serving loop pays per token)."]
    return {"load_1min_before": load_before, "load_1min_after": load_after, **result, "table": "\n".join(lines) + "\n"}
