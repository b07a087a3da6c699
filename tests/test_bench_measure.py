"""The benchmarks' shared helpers, and the one signature ``python -m benchmarks`` calls every
benchmark with (a module whose ``run`` lacks ``repeat`` stops ``make bench`` at that module)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import benchmarks
from benchmarks import _measure


def test_every_benchmark_takes_the_runner_arguments():
    names = [m.name for m in pkgutil.iter_modules(benchmarks.__path__) if m.name.startswith("bench_")]
    assert len(names) >= 6, names
    for name in names:
        run = importlib.import_module(f"benchmarks.{name}").run
        params = inspect.signature(run).parameters
        assert list(params)[:1] == ["out_dir"] and "repeat" in params, f"{name}.run{inspect.signature(run)}"


def test_median_of_runs_takes_each_number_s_median_and_keeps_the_rest():
    runs = [
        {"a": 1.0, "nested": {"x": 10, "label": "first"}, "flag": True, "pair": (1, 2)},
        {"a": 3.0, "nested": {"x": 30, "label": "second"}, "flag": False, "pair": (3, 4)},
        {"a": 2.0, "nested": {"x": 20, "label": "third"}, "flag": False, "pair": (5, 6)},
    ]
    assert _measure.median_of_runs(runs) == {"a": 2.0, "nested": {"x": 20.0, "label": "first"}, "flag": True, "pair": (1, 2)}


def test_a_figure_on_a_busy_machine_gets_no_verdict():
    assert _measure.verdict(0.5, 1.0, [0.1, _measure.CPUS + 0.5]) == "busy"
    assert _measure.verdict(0.5, 1.0, [0.1, 0.2]) == "met"
    assert _measure.verdict(1.5, 1.0, [0.1, 0.2]) == "not met"
    assert "BUSY" in _measure.load_line([_measure.CPUS + 1.0]) and "not busy" in _measure.load_line([0.0])
