"""What every benchmark shares: fresh-process measurements with the machine load beside them,
verdicts that refuse to judge a figure taken on a busy machine, and median/spread over repeats.

A figure is *busy* when the 1-minute load average, sampled just before or just after any of the
measurements it is made of, exceeds the number of cores: other work then competed for the CPU and
the figure says more about the neighbours than about the code. A busy figure is reported with its
value and the word ``busy`` instead of met / not met.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

ROOT = Path(__file__).resolve().parent.parent
CPUS = os.cpu_count() or 1


def load_now() -> float:
    return round(os.getloadavg()[0], 2)


def measured(fn: Callable[[], dict]) -> dict:
    """Run ``fn`` and return its result dict with ``load_before`` / ``load_after`` added."""
    before = load_now()
    result = fn()
    return {**result, "load_before": before, "load_after": load_now()}


def loads_of(runs: Iterable[dict]) -> list[float]:
    out: list[float] = []
    for r in runs:
        out += [r["load_before"], r["load_after"]]
    return out


def is_busy(loads: Sequence[float]) -> bool:
    return any(load > CPUS for load in loads)


def verdict(value: float, at_most: float, loads: Sequence[float]) -> str:
    """``busy`` when any load sample exceeded the core count, else ``met`` / ``not met``."""
    if is_busy(loads):
        return "busy"
    return "met" if value <= at_most else "not met"


def at_least_verdict(value: float, at_least: float, loads: Sequence[float]) -> str:
    if is_busy(loads):
        return "busy"
    return "met" if value >= at_least else "not met"


def summary(values: Sequence[float]) -> dict:
    """Median and spread (min, max, and max - min relative to the median) of repeated figures."""
    vals = sorted(float(v) for v in values)
    med = statistics.median(vals)
    return {
        "median": med,
        "min": vals[0],
        "max": vals[-1],
        "spread_pct": round(100.0 * (vals[-1] - vals[0]) / med, 1) if med else 0.0,
        "n": len(vals),
        "values": vals,
    }


def median_of_runs(runs: Sequence[Any]) -> Any:
    """One result of the shape of each of ``runs`` (results of repeated runs of one benchmark): every
    number is the median of the runs' numbers at that place; anything else is the first run's."""
    first = runs[0]
    if isinstance(first, bool) or not isinstance(first, (int, float, dict)):
        return first
    if isinstance(first, dict):
        return {k: median_of_runs([r[k] for r in runs if isinstance(r, dict) and k in r]) for k in first}
    return statistics.median(float(r) for r in runs)


def fmt(s: dict, digits: int = 3) -> str:
    """``median [min-max]`` for a :func:`summary`, or the single value when there was one run."""
    if s["n"] == 1:
        return f"{s['median']:.{digits}f}"
    return f"{s['median']:.{digits}f} [{s['min']:.{digits}f}-{s['max']:.{digits}f}]"


def child_json(module: str, args: Sequence[str], env_extra: dict[str, str] | None = None, *, timeout: float = 1800) -> dict:
    """Run ``python -m module args...`` in a fresh interpreter from the repository root; its last
    stdout line is JSON. Adds ``spawned_at`` (epoch seconds just before the start) and the load."""
    env = dict(os.environ)
    env.update(env_extra or {})
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")

    def go() -> dict:
        spawned = time.time()
        proc = subprocess.run(
            [sys.executable, "-m", module, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{module} {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        data = json.loads(proc.stdout.strip().splitlines()[-1])
        data["spawned_at"] = spawned
        return data

    return measured(go)


def load_line(loads: Sequence[float]) -> str:
    state = "BUSY (above the core count: verdicts withheld)" if is_busy(loads) else "not busy"
    return (f"Machine: {CPUS} cores; 1-minute load sampled around each measurement: "
            f"min {min(loads):.2f}, max {max(loads):.2f}: {state}.")


def jsonable(x: Any) -> Any:
    return json.loads(json.dumps(x, default=str))


@dataclasses.dataclass(frozen=True)
class ServingTimes:
    """What :func:`time_first_output_and_steps` measured."""

    #: Seconds from the first call to the first decode output (prefill, then one decode step).
    first_output_s: float
    #: Epoch seconds when that output was there (a parent measures its start-up from its spawn).
    first_output_at: float
    #: Seconds of each steady-state decode step, in the order they ran.
    step_s: list[float]
    #: The last step's output.
    out: Any

    @property
    def step_median_us(self) -> float:
        return statistics.median(self.step_s) * 1e6

    @property
    def step_p90_us(self) -> float:
        return sorted(self.step_s)[int(0.9 * len(self.step_s))] * 1e6


def time_first_output_and_steps(
    fn: Callable[..., Any], prefill: Sequence[Any], decode: Sequence[Any], steps: int, warmup: int = 5
) -> ServingTimes:
    """A server's two figures for a decoder callable: the time to its first output (a prefill, then
    one decode step: the two graphs it compiles before it answers) and ``steps`` steady-state decode
    steps after ``warmup`` untimed ones. The caller holds ``torch.no_grad()`` where it wants it."""
    start = time.perf_counter()
    fn(*prefill)
    out = fn(*decode)
    first_s = time.perf_counter() - start
    first_at = time.time()
    for _ in range(warmup):
        out = fn(*decode)
    samples = []
    for _ in range(steps):
        t0 = time.perf_counter()
        out = fn(*decode)
        samples.append(time.perf_counter() - t0)
    return ServingTimes(first_s, first_at, samples, out)
