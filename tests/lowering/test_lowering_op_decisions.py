"""Decisions for ops of namespaces the op table does not cover (reference/lowering/op_decisions.py):
real traces and real torch-mlir lowerings of each op's decomposition, on fake tensors."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from reference.lowering.op_decisions import DECISIONS, OpDecisions, has_composite_implicit, qualified_name

_LIB = torch.library.Library("op_decisions_tests", "DEF")
_LIB.define("scaled(Tensor x, float s) -> Tensor")
_LIB.impl("scaled", lambda x, s: torch.tanh(x) * s, "CompositeImplicitAutograd")
_LIB.define("binned(Tensor x) -> Tensor")
_LIB.impl("binned", lambda x: torch.histc(x, bins=4), "CompositeImplicitAutograd")
_LIB.define("calls_opaque(Tensor x) -> Tensor")
_LIB.impl("calls_opaque", lambda x: torch.ops.op_decisions_tests.opaque(x) + 1, "CompositeImplicitAutograd")
_LIB.define("two(Tensor x) -> Tensor")
_LIB.define("two.twice(Tensor x, Tensor y) -> Tensor")
_LIB.impl("two.twice", lambda x, y: x + y, "CompositeImplicitAutograd")


@torch.library.custom_op("op_decisions_tests::opaque", mutates_args=())
def opaque(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@opaque.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("op_decisions_tests::fill_into", mutates_args=("out",))
def fill_into(x: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(x.cos())


ops = torch.ops.op_decisions_tests


def _fake(*shape, dtype=torch.float32):
    with FakeTensorMode():
        return torch.empty(shape, dtype=dtype)


def test_a_composite_op_whose_ops_lower_lowers():
    d = OpDecisions().decide(ops.scaled.default, [_fake(4, 4), 0.5], {})
    assert d.lowers and d.op == "op_decisions_tests::scaled" and "CompositeImplicitAutograd" in d.reason


def test_a_composite_op_that_calls_an_op_of_the_table_does_not_lower_and_says_which():
    d = OpDecisions().decide(ops.binned.default, [_fake(16)], {})
    assert not d.lowers and "aten.histc" in d.reason and "CompositeImplicitAutograd" in d.reason


def test_a_custom_op_with_no_decomposition_does_not_lower():
    d = OpDecisions().decide(ops.opaque.default, [_fake(3)], {})
    assert not d.lowers and "no lowering" in d.reason and "no CompositeImplicitAutograd kernel" in d.reason


def test_a_composite_op_that_calls_an_opaque_op_does_not_lower_and_names_it():
    d = OpDecisions().decide(ops.calls_opaque.default, [_fake(3)], {})
    assert not d.lowers and "op_decisions_tests::opaque" in d.reason


def test_a_buffer_writing_kernel_lowers_through_its_inlined_implementation():
    op = ops.fill_into.default
    d = OpDecisions().decide(op, [_fake(5), _fake(5)], {}, inline_impl=fill_into._init_fn)
    assert d.lowers and "inlined" in d.reason
    assert not OpDecisions().decide(op, [_fake(5), _fake(5)], {}).lowers, "without the implementation to inline"


def test_an_overload_is_named_with_its_overload_name():
    assert qualified_name(ops.two.twice) == "op_decisions_tests::two.twice"
    assert qualified_name(ops.opaque.default) == "op_decisions_tests::opaque"
    assert has_composite_implicit(ops.two.twice) and not has_composite_implicit(ops.opaque.default)


def test_a_decision_is_made_once_per_op_and_dtypes():
    decisions = OpDecisions()
    first = decisions.decide(ops.scaled.default, [_fake(4), 2.0], {})
    again = decisions.decide(ops.scaled.default, [_fake(8, 3), 3.0], {})
    assert first == again and decisions.probes == 1, "another shape of the same op is looked up"
    decisions.decide(ops.scaled.default, [_fake(4, dtype=torch.float64), 2.0], {})
    assert decisions.probes == 2, "another dtype is decided again"
    decisions.clear()
    decisions.decide(ops.scaled.default, [_fake(4), 2.0], {})
    assert decisions.probes == 1


def test_the_process_decisions_key_on_the_tool_versions(monkeypatch):
    from reference.lowering import op_decisions

    DECISIONS.clear()
    DECISIONS.decide(ops.scaled.default, [_fake(4), 2.0], {})
    monkeypatch.setattr(op_decisions, "tool_versions", lambda: {"torch": "another"})
    DECISIONS.decide(ops.scaled.default, [_fake(4), 2.0], {})
    assert DECISIONS.probes == 2, "a decision made with other tools is not reused"
    DECISIONS.clear()


def test_the_grouped_experts_op_of_transformers_is_lowered_by_the_backend_and_matches_it():
    pytest.importorskip("transformers.integrations.moe", reason="needs the 'models' extra")
    from reference.lowering.decompositions import grouped_mm_rows, library_lowerings

    op = torch.ops.transformers.grouped_mm_fallback.default
    assert library_lowerings()[op] is grouped_mm_rows
    d = OpDecisions().decide(op, [_fake(6, 16), _fake(4, 16, 8), _fake(4, dtype=torch.int32)], {})
    assert d.lowers and d.op == "transformers::grouped_mm_fallback" and "the backend lowers it" in d.reason
    g = torch.Generator().manual_seed(0)
    # groups of every size, empty ones included, and rows past the last offset (which stay zero)
    for counts in ([2, 0, 3, 1], [0, 0, 0, 6], [1, 1, 1, 1], [6, 0, 0, 0]):
        x, w = torch.randn(6, 16, generator=g), torch.randn(4, 16, 8, generator=g)
        offs = torch.cumsum(torch.tensor(counts), 0, dtype=torch.int32)
        torch.testing.assert_close(grouped_mm_rows(x, w, offs), op(x, w, offs), rtol=1e-5, atol=1e-5)
