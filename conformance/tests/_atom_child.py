"""Run in a fresh process by the ATOM compilation tests: build the tiny decoder at level 3 on a
given cache directory, run it at the given sizes, report counters and outputs.

``python -m conformance.tests._atom_child --impl SPEC --out FILE --cache-dir DIR --compiler NAME
--layers L --compile-sizes 4 --sizes 4,5``

Writes JSON: ``counters`` (the delta of the ATOM counters over the run), ``outputs`` (per size,
nested lists), and on failure ``error``.
"""

from __future__ import annotations

import argparse
import json
import traceback


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", default=None)
    parser.add_argument("--out", required=True)
    parser.add_argument("--cache-dir", required=True)
    parser.add_argument("--compiler", required=True)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--compile-sizes", default="")
    parser.add_argument("--sizes", required=True)
    ns = parser.parse_args()
    result: dict = {}
    try:
        import torch

        from conformance.models import atom_model as M
        from conformance.harness.implementation import load_implementation

        atom = load_implementation(ns.impl).atom()
        compile_sizes = [int(s) for s in ns.compile_sizes.split(",") if s]
        config = atom.Config(
            max_num_seqs=8,
            compilation_config=atom.CompilationConfig(
                level=3, cudagraph_capture_sizes=[1, 2, 4, 8], compile_sizes=compile_sizes,
                piece_compiler=ns.compiler, cache_dir=ns.cache_dir,
            ),
        )
        before = atom.COUNTERS.snapshot()
        model = M.build_decoder(atom, config, layers=ns.layers)
        outputs = {}
        with torch.no_grad():
            for size in [int(s) for s in ns.sizes.split(",")]:
                outputs[str(size)] = model(M.inputs(size)).tolist()
        result["counters"] = atom.COUNTERS.delta(before).as_dict()
        result["outputs"] = outputs
    except BaseException as exc:  # reported to the parent, which fails the test with it
        result["error"] = {"type": type(exc).__name__, "message": str(exc), "traceback": traceback.format_exc()}
    with open(ns.out, "w") as f:
        json.dump(result, f)
    return 3 if "error" in result else 0


if __name__ == "__main__":
    raise SystemExit(main())
