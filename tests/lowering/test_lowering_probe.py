"""The lowering probe's keys and its kept decisions (reference/lowering/lowering_probe.py), and the
backend learning from a failed graph (reference/backends/lowering_fallback.py).

The keys and the store are pure; the two compile tests run the real pipeline (torch-mlir, IREE) on
one-op graphs: an op torch-mlir cannot lower whose torch decomposition lowers is decomposed and the
graph stays whole; an op with no decomposition breaks the graph, with a reason naming it."""

from __future__ import annotations

import json

import pytest
import torch

from reference.lowering.lowering_probe import (
    BREAK, DECOMPOSE, Decision, Decisions, DECISIONS, learned_decompositions, signature, target_name,
)


def test_the_key_holds_dtype_and_rank_class_of_each_tensor_and_every_constant():
    assert signature([torch.ones(()), torch.ones(0, 3), torch.ones(2, 3)], {}) == "float32[0d], float32[empty], float32[2d]"
    assert signature([torch.ones(2, dtype=torch.int64), [3, 2], (3, 2), None, 0.5], {"dim": -1}) == (
        "int64[1d], [3,2], [3,2], None, 0.5, dim=-1")
    # the same class, another size: one key; another rank, a zero size, a constant: another key
    assert signature([torch.ones(4, 4)], {}) == signature([torch.ones(7, 2)], {})
    assert len({signature([torch.ones(4, 4)], {}), signature([torch.ones(4)], {}), signature([torch.ones(4, 0)], {}),
                signature([torch.ones(4, 4)], {"dim": 1})}) == 4


def test_a_call_is_named_by_what_it_calls():
    assert target_name("sin") == "Tensor.sin"
    assert target_name(torch.ops.aten.addmv.default) == "aten.addmv.default"
    assert target_name(torch.addmv) == "torch.addmv"
    assert target_name(torch.nn.functional.interpolate) == "torch.nn.functional.interpolate"


def test_decisions_are_kept_on_disk_and_read_by_another_process_with_the_same_tools(tmp_path):
    folder = str(tmp_path / "probe")
    first = Decisions()
    d = Decision(BREAK, "torch.segment_reduce", "float32[1d], 'sum'", "aten.segment_reduce.default", "no lowering")
    assert first.add(d, folder) and not first.add(d, folder)  # known: not kept twice
    (tmp_path / "probe" / "junk.json").write_text("{not json")
    other = Decisions()
    assert other.load(folder) == 1 and other.load(folder) == 0  # once per folder
    assert other.all() == [d]
    assert other.breaks_on(torch.segment_reduce) and not other.breaks_on(torch.sin)
    # a record made with other tool versions is not read
    record = json.loads(next(p for p in (tmp_path / "probe").glob("*.json") if p.name != "junk.json").read_text())
    record["tools"] = "[]"
    (tmp_path / "probe" / "old.json").write_text(json.dumps(record))
    assert Decisions().load(folder) == 1


def test_a_learned_decomposition_applies_only_to_calls_of_its_key():
    store = Decisions()
    op = torch.ops.aten.addmv.default
    store.add(Decision(DECOMPOSE, str(op), "float32[1d], float32[2d], float32[1d]", str(op), "decomposes"))
    table = learned_decompositions(store)
    assert list(table) == [op]
    x, m, v = torch.randn(3), torch.randn(3, 4), torch.randn(4)
    torch.testing.assert_close(table[op](x, m, v), torch.addmv(x, m, v))
    assert table[op](x.double(), m.double(), v.double()) is NotImplemented


@pytest.fixture
def fresh_decisions(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_NEURONX_HLO_CACHE_DIR", str(tmp_path / "hlo"))
    DECISIONS.clear()
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    DECISIONS.clear()


@pytest.mark.slow
def test_an_op_torch_mlir_cannot_lower_is_decomposed_or_split_out_and_matches_eager(fresh_decisions):
    from torch._dynamo.utils import counters

    # addmv: no StableHLO pattern, torch's decomposition lowers: decomposed, no break
    x, m, v = torch.randn(3), torch.randn(3, 4), torch.randn(4)
    counters["graph_break"].clear()
    got = torch.compile(lambda x, m, v: torch.addmv(x.sin(), m, v) * 2, backend="neuron")(x, m, v)
    torch.testing.assert_close(got, torch.addmv(x.sin(), m, v) * 2)
    assert not counters["graph_break"]
    assert [d.kind for d in DECISIONS.all()] == [DECOMPOSE]
    # segment_reduce: no pattern and no decomposition: the graph breaks there, the rest compiles
    data, lengths = torch.randn(6), torch.tensor([2, 4])

    def fn(d, l):
        return torch.segment_reduce(d.cos(), "sum", lengths=l).exp()

    got = torch.compile(fn, backend="neuron")(data, lengths)
    torch.testing.assert_close(got, fn(data, lengths))
    reasons = [r for r in counters["graph_break"] if "op=aten.segment_reduce.default" in r]
    assert reasons and "torch-mlir could not lower torch.aten.segment_reduce" in reasons[0]


def test_a_probe_child_that_gives_no_answer_is_stopped_at_its_deadline():
    import time

    from reference.lowering.lowering_probe import isolated

    start = time.monotonic()
    got = isolated(lambda: time.sleep(60), died=lambda status: ("died", status), timeout=1.0)
    assert got[0] == "died" and time.monotonic() - start < 30
    assert isolated(lambda: 6 * 7, died=lambda status: None) == 42


_OPENMP_FORK = r"""
import torch
from reference.lowering.lowering_probe import isolated

torch.set_num_threads(2)
x = torch.randn(1500, 1500)
(x @ x).sum(); x.exp().sum()  # the parent's OpenMP workers start
print("ANSWER", isolated(lambda: float((x @ x).sum() + x.exp().sum()) > -1e30, died=lambda status: f"died {status}", timeout=60))
"""


@pytest.mark.slow
def test_a_probe_child_computes_although_the_parent_ran_openmp_work():
    """A fork does not copy the parent's OpenMP workers: a child that runs a parallel op with the
    parent's thread count waits forever (the op lane's drift check hung there). Run in a real
    subprocess with two threads, whatever the test process has."""
    import os
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _OPENMP_FORK], capture_output=True, text=True, timeout=300,
                         env={k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"})
    assert run.returncode == 0, run.stderr[-2000:]
    assert "ANSWER True" in run.stdout, run.stdout + run.stderr[-2000:]
