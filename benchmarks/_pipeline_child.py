"""One measurement of the pipeline benchmark, in a fresh interpreter.

``python -m benchmarks._pipeline_child BACKEND STEPS`` (BACKEND: neuron, inductor or eager) builds
the decoder fixture, times its first output (a prefill at the first bucket, then one decode step:
the two graphs a server compiles before it answers), then times ``STEPS`` steady-state decode
steps, and prints one JSON line. The caches it uses come from the environment the parent sets, so
the parent decides whether this start is cold or warm.
"""

from __future__ import annotations

import json
import statistics
import sys
import time


def main(backend: str, steps: int) -> dict:
    import torch

    from neuron_fixtures import DECODER_PREFILL_BUCKETS, decoder_decode_inputs, decoder_model, decoder_prefill_inputs

    torch.manual_seed(0)
    model = decoder_model().eval()
    prefill = decoder_prefill_inputs(model, DECODER_PREFILL_BUCKETS[0])
    decode = decoder_decode_inputs(model)

    if backend == "eager":
        fn = model
    else:
        fn = torch.compile(model, backend=backend, dynamic=False)

    with torch.no_grad():
        start = time.perf_counter()
        fn(*prefill)
        out = fn(*decode)
        first_s = time.perf_counter() - start

        for _ in range(5):
            out = fn(*decode)
        samples = []
        for _ in range(steps):
            t0 = time.perf_counter()
            out = fn(*decode)
            samples.append(time.perf_counter() - t0)
    return {
        "backend": backend,
        "first_output_s": first_s,
        "decode_step_median_us": statistics.median(samples) * 1e6,
        "decode_step_p90_us": sorted(samples)[int(0.9 * len(samples))] * 1e6,
        "steps": steps,
        "logits_checksum": float(out.double().sum()),
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]))))
