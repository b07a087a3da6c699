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


def test_the_before_after_table_reads_the_compilers_time_from_the_entries_and_labels_a_busy_machine(tmp_path):
    from benchmarks import ab

    for key, us in (("a" * 32, 1_500_000), ("b" * 32, 250_000)):
        (tmp_path / key).mkdir()
        (tmp_path / key / "metadata.json").write_text(f'{{"compile_time_us": {us}}}')
    assert ab._compiler_seconds(tmp_path) == 1.75
    fig = {"before": _measure.summary([2.0, 4.0]), "after": _measure.summary([3.0]), "ratio": 1.0}
    result = {"before": "1" * 40, "after": "2" * 40, "after_has_uncommitted_changes": True, "reps": 2, "steps": 5,
              "cores": 2, "loads": {"min": 0.5, "max": 2.5}, "busy": True, "figures": {"decode step (us)": fig},
              "when": "now"}
    text = ab.table(result)
    assert "1111111111 -> 2222222222 (plus uncommitted changes)" in text and "BUSY" in text
    assert "| decode step (us) | 3.000 [2.000-4.000] | 3.000 [3.000-3.000] | 1.000 |" in text


def test_time_first_output_and_steps_times_prefill_decode_then_the_steps():
    calls = []

    def fn(*args):
        calls.append(args)
        return len(calls)

    times = _measure.time_first_output_and_steps(fn, ("prefill",), ("decode",), steps=4, warmup=2)
    assert calls == [("prefill",), ("decode",)] + [("decode",)] * 6
    assert len(times.step_s) == 4 and times.out == 8
    assert times.first_output_s >= 0 and times.step_median_us >= 0 and times.step_p90_us >= times.step_median_us
