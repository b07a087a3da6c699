"""The ATOM benchmark's report: ratios against eager of the same run, the load beside each row,
busy labels and the reference step's verdict. The measuring children are faked (``_one_run``
returns made-up rows): what is under test is what the report says of given figures."""

from __future__ import annotations

import pytest

from benchmarks import bench_atom


def _row(step4: float, step5: float, load: float, warm: bool = True) -> dict:
    cold = {
        "first_call_s": 10.0, "spawn_to_first_output_s": 12.0, "steady_ms": {"4": step4, "5": step5},
        "max_abs_error_vs_eager": 1e-6, "counters": {"num_backend_compilations": 5}, "profile": [],
        "load_before": load, "load_after": load,
    }
    row = {"cold": cold}
    if warm:
        row["warm"] = {**cold, "first_call_s": 2.0, "counters": {"num_backend_compilations": 0}}
    return row


def _fake_run(reference_step: float, reference_load: float, eager_load: float = 0.1):
    rows = {
        "eager": _row(0.2, 0.2, eager_load, warm=False),
        "level2_inductor": _row(0.15, 0.15, 0.1, warm=False),
        "level3_inductor": _row(0.2, 0.22, 0.1),
        "level3_inductor_fx": _row(0.2, 0.22, 0.1),
        "level3_reference": _row(reference_step, reference_step * 0.9, reference_load),
    }
    rows["level3_reference"]["cold"]["profile"] = [
        {"function": "__call__ (reference/runtime.py:227)", "calls_per_step": 5, "own_us_per_step": 40.0, "cumulative_us_per_step": 90.0}
    ]
    return rows


@pytest.mark.parametrize(
    "step, load, expected",
    [(0.25, 0.1, "met"), (0.4, 0.1, "not met"), (0.25, 99.0, "busy"), (0.4, 99.0, "busy")],
)
def test_the_reference_step_verdict_is_taken_against_eager_of_the_same_run(monkeypatch, tmp_path, step, load, expected):
    monkeypatch.setattr(bench_atom, "_one_run", lambda: _fake_run(step, load))
    result = bench_atom.run(tmp_path)
    v = result["verdicts"]
    assert v["reference_step_vs_eager"] == pytest.approx(step / 0.2)
    assert v["verdict"] == expected
    assert f"target at most 1.5x: **{expected}**" in result["table"]


def test_every_row_shows_its_load_and_whether_it_was_busy(monkeypatch, tmp_path):
    monkeypatch.setattr(bench_atom, "_one_run", lambda: _fake_run(0.25, 99.0))
    result = bench_atom.run(tmp_path)
    lines = {line.split("|")[1].strip(): line for line in result["table"].splitlines() if line.startswith("| ")}
    assert lines["level3_reference"].rstrip().endswith("| 99.00-99.00 | busy |")
    assert lines["eager"].rstrip().endswith("| 0.10-0.10 | no |")
    # the ratio columns: 0.25 / 0.2 at the compile size, 0.225 / 0.2 at the other
    assert "| 1.25 | 1.12 |" in lines["level3_reference"]
    assert "Profile of one level3_reference step" in result["table"]
    assert "`__call__ (reference/runtime.py:227)` | 5 | 40.0 | 90.0 |" in result["table"]


def test_an_eager_load_above_the_cores_makes_the_verdict_busy_too(monkeypatch, tmp_path):
    monkeypatch.setattr(bench_atom, "_one_run", lambda: _fake_run(0.25, 0.1, eager_load=99.0))
    assert bench_atom.run(tmp_path)["verdicts"]["verdict"] == "busy"
