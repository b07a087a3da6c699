"""The numerics contract's parts, without compiling: the precision declaration an adapter gives
(``declared_precision``), the edges of each dtype and how results on them are compared
(``conformance/harness/edges.py``), and the op lane's redrawing of a sample at the edges."""

from __future__ import annotations

import math

import pytest
import torch

from conformance import Implementation
from conformance.harness import edges as E
from conformance.harness.precision import Precision
from conformance.harness.tolerances import POLICY, PrecisionDeclarationError, declared_precision


class _Declares(Implementation):
    name = "declares"

    def __init__(self, answer):
        self._answer = answer

    def precision(self):
        return self._answer() if callable(self._answer) else self._answer


def test_a_declaration_naming_no_torch_dtype_is_an_error_naming_the_adapters_method():
    with pytest.raises(PrecisionDeclarationError, match=r"_Declares\.precision\(\).*'fp32' is not the name of a torch"):
        declared_precision(_Declares(lambda: Precision(computes={"float64": "fp32"})))
    with pytest.raises(PrecisionDeclarationError, match=r"_Declares\.precision\(\) returned dict"):
        declared_precision(_Declares({"float64": "float32"}))
    declared = Precision(computes={"float64": "float32", "float32": "tf32"})
    assert declared_precision(_Declares(declared)) is declared


def test_the_summary_reports_a_precision_that_cannot_be_read_instead_of_raising_again():
    from conformance.reporting.report import _precision

    text = _precision(_Declares(lambda: Precision(computes={"float64": "fp32"})))
    assert text.startswith("not declared: _Declares.precision() failed (ValueError: ") and "'fp32'" in text
    assert _precision(_Declares(Precision())) == "every float dtype computed as itself"


def test_a_dtype_computed_in_a_narrower_one_is_held_at_the_narrower_ones_edges():
    own = {e.id for e in E.edges_for("float64", "float64")}
    narrowed = E.edges_for("float64", "float32")
    assert own == {"float64-large", "float64-tiny", "float64-subnormal", "float64-specials"}
    assert {e.id for e in narrowed} == {"float64-large(as-float32)", "float64-tiny(as-float32)",
                                        "float64-subnormal(as-float32)", "float64-specials(as-float32)"}
    assert max(e.hi for e in narrowed) <= torch.finfo(torch.float32).max
    bf16 = {e.name: e for e in E.edges_for("bfloat16", "bfloat16")}
    assert bf16[E.BEYOND_FLOAT16].lo > torch.finfo(torch.float16).max
    assert bf16[E.BELOW_FLOAT16_NORMAL].hi <= torch.finfo(torch.float16).smallest_normal
    assert bf16[E.BELOW_FLOAT16_NORMAL].lo >= torch.finfo(torch.bfloat16).smallest_normal
    drawn = bf16[E.BEYOND_FLOAT16].band((64,), torch.Generator().manual_seed(0))
    assert drawn.dtype == torch.bfloat16 and bool((drawn.abs() > 65504).all()) and bool(drawn.isfinite().all())


def test_the_absolute_tolerance_follows_the_band_so_tiny_values_are_compared():
    tiny = next(e for e in E.edges_for("float32", "float32") if e.name == E.TINY)
    with POLICY.use(Precision()):
        rtol, atol = tiny.tolerance()
        assert rtol == 1e-4 and atol < tiny.lo * 1e-4
        x = torch.full((3,), tiny.lo * 4)
        assert E.difference(torch.zeros(3), x, rtol, atol) is not None  # flushed to zero: caught
        assert E.difference(x * (1 + 1e-6), x, rtol, atol) is None
        assert E.edges_for("int64", "int64")[0].tolerance() == (0.0, 0.0)


def test_a_difference_names_the_first_element_and_checks_infinities_nans_and_signed_zeros():
    e = torch.tensor([math.inf, -math.inf, math.nan, -0.0, 1.0])
    assert E.difference(e.clone(), e, 1e-4, 1e-5, signed_zeros=True) is None
    why = E.difference(torch.tensor([math.inf, math.inf, math.nan, -0.0, 1.0]), e, 1e-4, 1e-5)
    assert why.startswith("1 of 5 elements differ") and "first at [1]: eager -inf, compiled inf" in why
    flipped = torch.tensor([math.inf, -math.inf, math.nan, 0.0, 1.0])
    assert E.difference(flipped, e, 1e-4, 1e-5) is None
    assert "signed zeros" in E.difference(flipped, e, 1e-4, 1e-5, signed_zeros=True)
    assert "dtype float16" in E.difference(e.half(), e, 1e-4, 1e-5)
    big = torch.tensor([2 ** 62, -(2 ** 63)])
    assert "exact" in E.difference(big + 1, big, 0.0, 0.0)


def test_at_edges_redraws_the_rows_dtype_only_and_keeps_shapes():
    from types import SimpleNamespace

    sample = SimpleNamespace(input=torch.randn(4, 6), args=(torch.randn(6), 2, torch.tensor([0, 1])),
                             kwargs={"other": torch.randn(4, 6), "dim": 1})
    out = E.at_edges(sample, "float32", "float32", seed=3)
    assert out is not sample and out.input.shape == (4, 6) and out.kwargs["other"].shape == (4, 6)
    assert out.args[1] == 2 and torch.equal(out.args[2], sample.args[2]) and out.kwargs["dim"] == 1
    values = torch.cat([out.input.flatten(), out.args[0], out.kwargs["other"].flatten()])
    assert bool((~values.isfinite()).any()) and float(values[values.isfinite()].abs().max()) > 1e30
    torch.testing.assert_close(E.at_edges(sample, "float32", "float32", seed=3).input, out.input, rtol=0, atol=0,
                               equal_nan=True)  # the same seed, the same values
    ints = SimpleNamespace(input=torch.tensor([1, 2, 3]), args=(torch.tensor([0, 1]),), kwargs={})
    redrawn = E.at_edges(ints, "int64", "int64", seed=1)
    assert torch.equal(redrawn.args[0], ints.args[0]) and redrawn.input.shape == (3,)
    assert E.at_edges(ints, "bool", "bool", seed=1) is None


def test_the_op_table_shows_the_edge_variant_beside_the_rows_verdicts(tmp_path):
    import json

    from conformance.harness.opinfo import Verdict
    from conformance.reporting import ops_table

    ops_table.record(tmp_path, Verdict("abs", "float32", "matches"))
    ops_table.record(tmp_path, Verdict("exp", "bfloat16", "matches"))
    ops_table.record(tmp_path, Verdict("abs", "float32", "matches"), "edges")
    ops_table.record(tmp_path, Verdict("exp", "bfloat16", "wrong", "2 of 9 elements differ", "sample 0"), "edges")
    table = ops_table.write(tmp_path, "reference")
    rows = {(r["entry"], r["dtype"]): r for r in json.loads((tmp_path / "ops.json").read_text())["rows"]}
    assert rows[("abs", "float32")]["edges"] == "matches" and rows[("exp", "bfloat16")]["edges"] == "wrong"
    assert table["edges"]["counts"]["wrong"] == 1 and table["counts"]["wrong"] == 0
    text = (tmp_path / "ops.md").read_text()
    assert "## At the edges of each dtype" in text
    assert "| exp | bfloat16 | matches | wrong | 2 of 9 elements differ | sample 0 |" in text
    ops_table.main(["--report-dir", str(tmp_path), "--clear"])
    assert not (tmp_path / "op-verdicts-edges").exists()
