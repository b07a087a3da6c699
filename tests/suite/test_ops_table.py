"""The op lane's verdict logic and tables, without compiling: comparing with eager, the table's
order and counts, the drift between two tables, the known-rows file."""

from __future__ import annotations

import json

import pytest
import torch

from conformance.harness import opinfo
from conformance.reporting import ops_table


def test_mismatch_holds_integers_exact_and_floats_to_the_tolerance():
    assert opinfo.mismatch(torch.tensor([2, -2]), torch.tensor([2, -2]), 0, 0) is None
    why = opinfo.mismatch(torch.tensor([-1, 1]), torch.tensor([2, -2]), 0, 0)
    assert why is not None and "2 of 2 elements differ" in why and "max abs error 3" in why
    assert opinfo.mismatch(torch.tensor([1.0, float("nan")]), torch.tensor([1.00001, float("nan")]), 1e-4, 1e-5) is None
    why = opinfo.mismatch(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.1]), 1e-4, 1e-5)
    assert why is not None and "max abs error 0.1" in why
    # a NaN where eager has a number is wrong, and its error reads inf
    why = opinfo.mismatch(torch.tensor([float("nan")]), torch.tensor([1.0]), 1e-4, 1e-5)
    assert why is not None and "inf" in why


def test_mismatch_names_dtype_shape_and_structure():
    assert "dtype float32 != eager's int64" in opinfo.mismatch(torch.zeros(2), torch.zeros(2, dtype=torch.int64), 0, 0)
    assert "shape [3] != eager's [2]" in opinfo.mismatch(torch.zeros(3), torch.zeros(2), 0, 0)
    assert "structure" in opinfo.mismatch((torch.zeros(1),), (torch.zeros(1), torch.zeros(1)), 0, 0)
    # a random op: structure only
    assert opinfo.mismatch(torch.ones(2), torch.zeros(2), 0, 0, values=False) is None


def test_the_seed_depends_on_the_row_only():
    assert opinfo.seed_for("add", "float32") == opinfo.seed_for("add", "float32")
    assert opinfo.seed_for("add", "float32") != opinfo.seed_for("add", "int64")


def _row(entry, dtype, verdict, detail=""):
    return {"entry": entry, "dtype": dtype, "verdict": verdict, "detail": detail, "sample": "", "samples": 1,
            "tolerance": "", "evidence": {}}


def test_the_table_lists_rows_to_act_on_first_and_counts_per_dtype():
    rows = [_row("add", "float32", "matches"), _row("remainder", "int64", "wrong", "1 of 1 elements differ"),
            _row("sort", "float32", "graph break", "sort breaks"), _row("sum", "bfloat16", "error", "RuntimeError: x")]
    table = ops_table.build(rows, "nobody")
    assert [r["verdict"] for r in table["rows"]] == ["wrong", "error", "graph break", "matches"]
    assert table["counts"]["wrong"] == 1 and table["counts"]["matches"] == 1
    assert table["per_dtype"]["int64"] == {"wrong": 1}
    text = ops_table.render(table)
    act = text.index("## Rows to act on")
    assert text.index("| remainder | int64 | wrong |") > act
    assert "| add | ok |" in text


def test_drift_names_each_row_whose_verdict_changed():
    old = ops_table.build([_row("add", "float32", "matches"), _row("mul", "int64", "matches")], "x")
    new = ops_table.build([_row("add", "float32", "wrong", "differ"), _row("mul", "int64", "matches"),
                           _row("neg", "bool", "error")], "x")
    lines = ops_table.drift(old, new)
    assert lines == ["add float32: checked in matches, fresh run wrong (differ)",
                     "neg bool: checked in absent, fresh run error ()"]
    assert ops_table.drift(old, old) == []
    # a host-dependent row (its cause starts "host:") is compared only for being there
    assert ops_table.drift(old, new, {("add", "float32")}) == ["neg bool: checked in absent, fresh run error ()"]


def test_host_dependent_rows_are_the_known_rows_so_marked(tmp_path, monkeypatch):
    monkeypatch.setattr(ops_table, "KNOWN", tmp_path)
    (tmp_path / "someone.txt").write_text("conv float16  # host: eager rounds by CPU\nmul int64  # a cause\n",
                                         encoding="utf-8")
    assert ops_table.host_rows("someone") == {("conv", "float16")}


def test_known_rows_need_a_cause(tmp_path, monkeypatch):
    monkeypatch.setattr(ops_table, "KNOWN", tmp_path)
    (tmp_path / "someone.txt").write_text("# comment\nremainder int64  # the cause\n", encoding="utf-8")
    assert ops_table.known_rows("someone") == {("remainder", "int64"): "the cause"}
    (tmp_path / "someone.txt").write_text("remainder int64\n", encoding="utf-8")
    with pytest.raises(ops_table.OpsTableError, match="entry dtype  # cause"):
        ops_table.known_rows("someone")


def test_a_table_is_made_from_the_recorded_verdicts(tmp_path):
    ops_table.record(tmp_path, opinfo.Verdict("add", "float32", "matches"))
    ops_table.record(tmp_path, opinfo.Verdict("cat", "bool", "error", "LoweringError: graph 'g_12_inference_0': no"))
    table = ops_table.write(tmp_path, "nobody")
    data = json.loads((tmp_path / "ops.json").read_text())
    assert data["entries"] == 2 and data["counts"]["error"] == 1
    # the graph's name (a counter that changes from run to run) is not part of the table
    assert table["rows"][0]["detail"] == "LoweringError: graph: no"
    with pytest.raises(ops_table.OpsTableError, match="make ops"):
        ops_table.collect(tmp_path / "empty")


def test_an_opinfo_declared_tolerance_is_read():
    pytest.importorskip("expecttest")
    entries = opinfo.entries()
    declared = {name: opinfo.declared_tolerance(o, torch.float16) for name, o in entries.items()}
    assert any(v is not None for v in declared.values())
    rtol, atol, source = opinfo.tolerance_for(entries["abs"], torch.int64)
    assert (rtol, atol, source) == (0.0, 0.0, "suite")


def test_a_run_of_some_rows_completes_the_base_table(tmp_path):
    base = tmp_path / "base.json"
    base.write_text(json.dumps(ops_table.build([_row("add", "float32", "matches"), _row("mul", "float32", "error", "x")], "x")))
    merged = ops_table.carried_over(base, [_row("mul", "float32", "matches"), _row("add", "int64", "matches")])
    verdicts = {(r["entry"], r["dtype"]): r["verdict"] for r in merged}
    assert verdicts == {("add", "float32"): "matches", ("mul", "float32"): "matches", ("add", "int64"): "matches"}


def test_a_floating_result_of_an_exact_row_gets_the_tolerance_of_its_dtype():
    # cos of an int64 tensor is float32: one ulp of rounding is not wrong
    got = torch.tensor([0.5403023, -0.4161468])
    want = got.nextafter(torch.tensor(2.0))
    assert opinfo.mismatch(got, want, 0.0, 0.0) is None
    why = opinfo.mismatch(got, want + 0.01, 0.0, 0.0)
    assert why is not None and "rtol 0.0001" in why
    # integer and bool results stay exact
    assert opinfo.mismatch(torch.tensor([1, 2]), torch.tensor([1, 3]), 0.0, 0.0) is not None
    assert opinfo.mismatch(torch.tensor([True]), torch.tensor([False]), 0.0, 0.0) is not None


def test_indices_of_equal_elements_in_another_order_are_right_where_torch_leaves_it_open():
    """sort/argsort/topk: eager's CPU sort is unstable, so indices that differ from eager's only
    among equal elements are right; a duplicated index, values out of order, or stable=True are not."""
    from types import SimpleNamespace

    x = torch.tensor([[1, 0, 1, 0], [2, 2, 1, 1]])
    eager = tuple(torch.sort(x, dim=1))
    along = SimpleNamespace(input=x, args=(1,), kwargs={})
    other = torch.tensor([[3, 1, 2, 0], [3, 2, 1, 0]])  # the zeros and the ones swapped among themselves
    assert opinfo.mismatch((torch.gather(x, 1, other), other), eager, 0, 0) is not None
    assert opinfo.ties_reordered("sort", along, (torch.gather(x, 1, other), other), eager)
    assert opinfo.ties_reordered("argsort", along, other, torch.argsort(x, dim=1))
    twice = torch.tensor([[1, 1, 2, 0], [3, 2, 1, 0]])  # position 1 taken twice
    assert not opinfo.ties_reordered("sort", along, (torch.gather(x, 1, twice), twice), eager)
    unsorted = torch.tensor([[0, 1, 2, 3], [0, 1, 2, 3]])
    assert not opinfo.ties_reordered("sort", along, (torch.gather(x, 1, unsorted), unsorted), eager)
    assert not opinfo.ties_reordered("argsort", along, unsorted, torch.argsort(x, dim=1))
    stable = SimpleNamespace(input=x, args=(1,), kwargs={"stable": True})
    assert not opinfo.ties_reordered("sort", stable, (torch.gather(x, 1, other), other), eager)
    assert not opinfo.ties_reordered("msort", along, (torch.gather(x, 1, other), other), eager)  # not listed
    top = tuple(torch.topk(x.float(), 2, dim=1))
    picked = torch.tensor([[2, 0], [1, 0]])
    topk_sample = SimpleNamespace(input=x.float(), args=(2, 1), kwargs={})
    assert opinfo.ties_reordered("topk", topk_sample, (torch.gather(x.float(), 1, picked), picked), top)
    assert not opinfo.ties_reordered("topk", topk_sample, (top[0], torch.tensor([[0, 0], [1, 0]])), top)


def test_the_command_line_compares_two_runs_writes_a_table_and_clears_the_verdicts(tmp_path, capsys):
    """`python -m conformance.reporting.ops_table` as docs/adapter.md tells a team to use it."""
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    before.write_text(json.dumps(ops_table.build([_row("add", "float32", "matches"), _row("mul", "int64", "matches")], "x")))
    after.write_text(json.dumps(ops_table.build([_row("add", "float32", "wrong", "1 of 4 elements differ"),
                                                 _row("mul", "int64", "matches")], "x")))
    assert ops_table.main(["--compare", str(before), str(after)]) == 1
    out = capsys.readouterr().out
    assert "add float32: before matches, after wrong (1 of 4 elements differ)" in out
    assert "ops-table: 1 row(s) changed verdict" in out and "mul" not in out.split("ops-table:")[0]
    assert ops_table.main(["--compare", str(before), str(before)]) == 0
    assert "0 row(s) changed verdict" in capsys.readouterr().out

    report = tmp_path / "reference" / "ops"
    ops_table.record(report, opinfo.Verdict("add", "float32", "matches"))
    ops_table.record(report, opinfo.Verdict("neg", "bool", "error", "RuntimeError: no"))
    assert ops_table.main(["--report-dir", str(report)]) == 0
    assert "ops-table: reference: 2 entries, 2 rows, wrong 0, error 1," in capsys.readouterr().out
    assert json.loads((report / "ops.json").read_text())["counts"]["error"] == 1 and (report / "ops.md").is_file()
    assert ops_table.main(["--report-dir", str(report), "--clear"]) == 0
    assert not (report / ops_table.VERDICT_DIR).exists() and (report / "ops.json").is_file()


def test_a_reference_row_to_act_on_that_inductor_gets_right_is_listed_with_its_cause():
    """The lane's rule, held on the checked-in tables: where the reference is wrong or fails and
    Inductor matches eager on the same row, the row is in ``conformance/expected/ops/reference.txt``
    with its cause (a fix to make, or a limitation of the stand-in compiler), never silent."""
    reference, inductor = ({row: ops_table.checked_in_verdict(impl, *row) for row in ops_table.covered_rows(impl)}
                           for impl in ("reference", "inductor"))
    known = ops_table.known_rows("reference")
    to_act = {row for row, verdict in reference.items() if verdict in (opinfo.WRONG, opinfo.ERROR)}
    assert to_act, "the reference's table has no wrong or error row: is docs/support/reference-ops.json there?"
    silent = sorted(row for row in to_act if inductor.get(row) == opinfo.MATCHES and row not in known)
    assert not silent, f"the reference fails these rows where Inductor matches, with no cause listed: {silent}"
    # the comparison is not vacuous: Inductor's table has a verdict for every wrong row of the reference
    wrong = {row for row in to_act if reference[row] == opinfo.WRONG}
    assert wrong <= set(inductor), f"rows Inductor's table lacks: {sorted(wrong - set(inductor))}"


def test_the_parts_of_the_rows_hold_every_row_once_and_a_day_picks_its_part(monkeypatch):
    import datetime

    from conformance.harness.env import EnvironmentVariableError, ops_part

    rows = [(e, d) for e in ("add", "sin", "mm", "topk", "cat", "sort", "any") for d in opinfo.DTYPES]
    parts = [[r for r in rows if opinfo.in_part(*r, (k, 7))] for k in range(7)]
    assert sorted(r for p in parts for r in p) == sorted(rows)  # every row, once
    assert ops_part({"CONFORMANCE_OPS_PART": "3/7"}) == (3, 7) and ops_part({}) is None
    for bad in ("7/7", "-1/7", "x/7", "3", "3/0"):
        with pytest.raises(EnvironmentVariableError, match="CONFORMANCE_OPS_PART"):
            ops_part({"CONFORMANCE_OPS_PART": bad})
    # seven consecutive days give the seven parts
    days = [datetime.date(2026, 12, 1) + datetime.timedelta(days=i) for i in range(7)]
    assert sorted(ops_table._part("day/7", d) for d in days) == [(k, 7) for k in range(7)]
    assert ops_table._part("2/5") == (2, 5)
