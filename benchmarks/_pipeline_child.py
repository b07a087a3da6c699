"""One measurement of the pipeline benchmark, in a fresh interpreter.

``python -m benchmarks._pipeline_child MODE STEPS`` prints one JSON line. Times are epoch seconds
where the parent needs to measure from the moment it spawned the process.

- ``eager``, ``neuron``, ``inductor``, ``turbine_cpu``: builds the decoder fixture, times its first
  output (a prefill at the first bucket, then one decode step: the two graphs a server compiles
  before it answers), then ``STEPS`` steady-state decode steps. The caches come from the
  environment the parent sets, so the parent decides whether this start is cold or warm.
- ``floor``: what any compiler of this model must pay, measured in pieces: ``import torch``, a
  Dynamo trace of the same two calls (a backend that keeps the graph and runs it eagerly), and one
  ``iree-compile`` of each of the two lowered modules (lowering itself is not timed).
- ``profile``: ``neuron`` over warm caches with ``cProfile`` around ``STEPS`` decode steps; the top
  functions by own time and by cumulative time.
"""

from __future__ import annotations

import json
import sys
import time

from benchmarks._measure import time_first_output_and_steps


def _decoder():
    import torch

    from neuron_fixtures import DECODER_PREFILL_BUCKETS, decoder_decode_inputs, decoder_model, decoder_prefill_inputs

    torch.manual_seed(0)
    model = decoder_model().eval()
    return model, decoder_prefill_inputs(model, DECODER_PREFILL_BUCKETS[0]), decoder_decode_inputs(model)


def timed(backend: str, steps: int) -> dict:
    import torch

    imported = time.time()
    model, prefill, decode = _decoder()
    fn = model if backend == "eager" else torch.compile(model, backend=backend, dynamic=False)

    with torch.no_grad():
        times = time_first_output_and_steps(fn, prefill, decode, steps)
    return {
        "backend": backend,
        "imported_at": imported,
        "first_output_at": times.first_output_at,
        "first_output_s": times.first_output_s,
        "decode_step_median_us": times.step_median_us,
        "decode_step_p90_us": times.step_p90_us,
        "steps": steps,
        "logits_checksum": float(times.out.double().sum()),
    }


def floor() -> dict:
    import torch

    imported = time.time()
    model, prefill, decode = _decoder()

    def keep(gm, example_inputs, **_):
        return gm.forward

    with torch.no_grad():
        start = time.perf_counter()
        fn = torch.compile(model, backend=keep, dynamic=False)
        fn(*prefill)
        fn(*decode)
        trace_s = time.perf_counter() - start

    from reference.flows.tools import lower_graphs
    from reference.compiler.driver import CompilerConfig, CompilerDriver

    hlos = [g.hlo for args in (prefill, decode) for g in lower_graphs(model, args)]
    driver = CompilerDriver()
    compile_s = []
    for hlo in hlos:
        start = time.perf_counter()
        driver.compile(hlo, CompilerConfig.from_args(None), graph_name="floor")
        compile_s.append(time.perf_counter() - start)
    return {"imported_at": imported, "trace_s": trace_s, "compile_s": compile_s, "modules": len(hlos)}


def profile(steps: int, top: int = 25) -> dict:
    import cProfile
    import io
    import pstats

    import torch

    model, prefill, decode = _decoder()
    fn = torch.compile(model, backend="neuron", dynamic=False)
    with torch.no_grad():
        fn(*prefill)
        for _ in range(10):
            fn(*decode)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(steps):
            fn(*decode)
        prof.disable()
    stats = pstats.Stats(prof)
    total = stats.total_tt

    def rows(key: str) -> list[dict]:
        out = []
        for (file, line, name), (cc, nc, tt, ct, _callers) in sorted(
            stats.stats.items(), key=lambda kv: kv[1][2 if key == "tottime" else 3], reverse=True
        )[:top]:
            short = "/".join(file.split("/")[-2:])  # package/module: no machine paths in the report
            out.append({"function": f"{short}:{line}({name})", "calls_per_step": nc / steps,
                        "own_us_per_step": tt / steps * 1e6, "cumulative_us_per_step": ct / steps * 1e6})
        return out

    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(5)
    return {"steps": steps, "profiled_us_per_step": total / steps * 1e6,
            "by_own_time": rows("tottime"), "by_cumulative_time": rows("cumtime")}


if __name__ == "__main__":
    mode, steps = sys.argv[1], int(sys.argv[2])
    if mode == "floor":
        result = floor()
    elif mode == "profile":
        result = profile(steps)
    else:
        result = timed(mode, steps)
    print(json.dumps(result))
