"""Run every benchmark module, or those named: ``python -m benchmarks [pipeline cache ...]``."""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
from pathlib import Path

import benchmarks


def main(argv: list[str]) -> int:
    out_dir = Path("reports") / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    available = sorted(m.name.removeprefix("bench_") for m in pkgutil.iter_modules(benchmarks.__path__) if m.name.startswith("bench_"))
    chosen = argv or available
    unknown = [n for n in chosen if n not in available]
    if unknown:
        print(f"unknown benchmark(s) {unknown}; available: {available}", file=sys.stderr)
        return 2
    for name in chosen:
        module = importlib.import_module(f"benchmarks.bench_{name}")
        print(f"== {name}", flush=True)
        result = module.run(out_dir)
        (out_dir / f"{name}.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        table = result.get("table")
        if table:
            (out_dir / f"{name}.md").write_text(table)
            print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
