"""reports/selfcheck.md as a reviewer reads it (conformance/selfcheck/report.py): the kill rate, a
survivor named with why it survived, the control run's verdict, and the CPU total. The records are
written here in the form tests/suite/test_selfcheck.py writes them; no mutant runs."""

from __future__ import annotations

import json

from conformance.selfcheck import report


def _mutant(name: str, killed: bool, **extra) -> dict:
    return {"mutant": name, "contract": extra.pop("contract", "cache"), "breaks": f"{name} breaks it",
            "tests": ["t.py::test_x"], "killed": killed, "caught_by": ["t::test_x"] if killed else [],
            "why": "" if killed else "every selected test passed", "rc": 1 if killed else 0,
            "wall_s": 4.4, "cpu_s": extra.pop("cpu_s", 3.0), "failed": ["t::test_x"] if killed else []}


def test_the_report_names_a_survivor_the_control_verdict_and_the_cpu_total(tmp_path):
    results = tmp_path / "selfcheck"
    results.mkdir()
    for record in (_mutant("caught_one", True, cpu_s=5.0), _mutant("missed_one", False, contract="alpha", cpu_s=7.0),
                   {"mutant": report.CONTROL, "rc": 1, "failed": ["t::test_y"], "wall_s": 9.0, "cpu_s": 8.0, "ran": 2}):
        (results / f"{record['mutant']}.json").write_text(json.dumps(record))
    out = tmp_path / "selfcheck.md"

    assert report.main([str(results), str(out)]) == 0
    text = out.read_text()
    assert "Kill rate: **1/2** (50 %)" in text
    assert "The unmutated reference over the same tests: FAILED (t::test_y) (9 s wall, 8 s CPU)." in text
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    # sorted by contract: the survivor's row ("alpha") comes first and says why it survived
    assert rows[0].startswith("| `missed_one` | alpha |") and "**survived** (every selected test passed)" in rows[0]
    assert rows[1].startswith("| `caught_one` | cache |") and "`t::test_x`" in rows[1]
    assert "add up to 12 s for all mutants" in text


def test_an_empty_run_says_no_mutant_ran(tmp_path):
    (tmp_path / "selfcheck").mkdir()
    out = tmp_path / "nested" / "selfcheck.md"
    assert report.main([str(tmp_path / "selfcheck"), str(out)]) == 0
    assert "No mutant was run." in out.read_text() and "Kill rate" not in out.read_text()
