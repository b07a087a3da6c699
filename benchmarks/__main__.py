"""Run every benchmark module, or those named: ``python -m benchmarks [--repeat N] [pipeline cache ...]``.

``--repeat N`` repeats each benchmark's measurements N times and reports the median and spread of
every figure (default 1).
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
from pathlib import Path

import benchmarks


def main(argv: list[str]) -> int:
    available = sorted(m.name.removeprefix("bench_") for m in pkgutil.iter_modules(benchmarks.__path__) if m.name.startswith("bench_"))
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description="Benchmarks; figures go to reports/bench/.")
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"benchmarks to run (default: all of {available})")
    parser.add_argument("--repeat", type=int, default=1, metavar="N", help="repetitions per figure; reports median and spread")
    opts = parser.parse_args(argv)
    if opts.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {opts.repeat}")
    unknown = [n for n in opts.names if n not in available]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; available: {available}")
    out_dir = Path("reports") / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in opts.names or available:
        module = importlib.import_module(f"benchmarks.bench_{name}")
        print(f"== {name} (repeat {opts.repeat})", flush=True)
        result = module.run(out_dir, repeat=opts.repeat)
        (out_dir / f"{name}.json").write_text(json.dumps(result, indent=2, sort_keys=True, default=str) + "\n")
        table = result.get("table")
        if table:
            (out_dir / f"{name}.md").write_text(table)
            print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
