"""The checked-in op table: what it says, that it matches the installed tools, and that the probe
behind it decides from a real compile and run (not from lowering alone).

The full regeneration is ``make optable`` (``python -m reference.lowering.optable --write``); the
default test compares fingerprints and re-probes a sample of ops. When the installed tools differ
from the fingerprint, the test regenerates the table and fails naming the ops that changed."""

from __future__ import annotations

import json

import pytest
import torch

from reference.lowering import optable
from reference.lowering.stablehlo import decomposition_table

aten = torch.ops.aten


def test_the_table_is_a_checked_in_data_file_read_as_is():
    doc = json.loads(optable.TABLE_PATH.read_text())
    assert dict(optable.break_ops()) == doc["ops"]
    assert "histc" in doc["ops"] and "torch.aten.histc" in doc["ops"]["histc"]
    for compiles in ("add", "mul", "matmul", "where", "softmax", "sort", "argsort", "topk", "fmod"):
        assert compiles not in doc["ops"], compiles
    with pytest.raises(TypeError):
        optable.break_ops()["add"] = "no"  # read-only: the hook shares one mapping


@pytest.mark.spec("001.breaks.list-from-installed")
def test_the_checked_in_table_matches_the_installed_tools():
    checked_in = optable.load_table()
    installed = optable.fingerprint()
    if checked_in["fingerprint"] == installed:
        return
    fresh = optable.generate()
    changes = optable.diff(checked_in["ops"], fresh["ops"])
    pytest.fail(
        f"the op table was made for {checked_in['fingerprint']}, the installed tools are {installed}; "
        f"regenerate it (make optable). Ops that changed: {changes or 'none (only the fingerprint)'}"
    )


@pytest.fixture(scope="module")
def prober():
    return optable.Prober()


def _probe(prober, names):
    """What a regeneration would say of ``names`` (real lowering, compile and run)."""
    return {k: v for k, v in _generate_with(prober, names).items()}


def _generate_with(prober, names):
    ops = {}
    lowered = []
    for name in names:
        for sample in optable.make_samples(name):
            reason, ok = prober.lower(sample)
            if ok and reason:
                ops.setdefault(name, reason)
            elif ok:
                lowered.append(sample)
    for sample, reason in zip(lowered, prober.compile_and_run(lowered) if lowered else []):
        if reason:
            ops.setdefault(sample.name, reason)
    return ops


def test_a_sample_of_the_table_still_holds(prober):
    table = optable.break_ops()
    sample = ["histc", "erfinv", "add", "topk", "sort", "fmod", "cumsum"]
    found = _probe(prober, sample)
    assert set(found) == {n for n in sample if n in table}
    for name, reason in found.items():
        assert reason == table[name], name


def test_an_op_that_lowers_but_does_not_compile_is_caught(prober):
    # Without the backend's topk decomposition torch-mlir lowers topk, and IREE rejects the result:
    # a table built from lowering alone would let it through.
    without = optable.Prober()
    without.decomps = {k: v for k, v in decomposition_table().items() if k is not aten.topk.default}
    found = _probe(without, ["topk"])
    assert "topk" in found and found["topk"].startswith("the compiler rejects it"), found


def test_a_batch_that_fails_is_split_down_to_the_failing_op(prober):
    without = optable.Prober()
    without.decomps = {k: v for k, v in decomposition_table().items() if k is not aten.topk.default}
    found = _probe(without, ["add", "topk", "mul", "exp"])
    assert list(found) == ["topk"]


def test_a_changed_table_is_reported_op_by_op():
    old = {"histc": "no lowering", "topk": "the compiler rejects it"}
    new = {"histc": "no lowering", "angle": "no lowering"}
    assert optable.diff(old, new) == ["angle: now breaks: no lowering", "topk: now compiles (was: the compiler rejects it)"]


def test_nothing_is_probed_when_the_backend_decides_a_break(monkeypatch):
    from reference.backends import graph_breaks

    def refuse(*_a, **_k):
        raise AssertionError("probed on the call path")

    monkeypatch.setattr(optable.Prober, "__init__", refuse)
    monkeypatch.setattr(optable, "generate", refuse)
    decision = graph_breaks.decide("histc", [torch.empty(8, device="meta")], {})
    assert decision is not None and "histc" in decision.reason


def test_the_decomposition_table_does_not_depend_on_what_the_process_imported():
    """Inductor's import registers composite ops of other namespaces (``quantized_decomposed``) and
    the legacy collectives' decompositions; the lowering's table, and so the op table's
    fingerprint, must come out the same in a process that imported it first (two fresh processes)."""
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "if sys.argv[1] == 'inductor':\n    import torch._inductor.lowering\n"
        "from reference.lowering.stablehlo import decomposition_table\n"
        "print(len(decomposition_table()), sorted(str(k) for k in decomposition_table())[-3:])\n"
    )
    outs = [
        subprocess.run([sys.executable, "-c", probe, first], capture_output=True, text=True, timeout=300, check=True).stdout
        for first in ("plain", "inductor")
    ]
    assert outs[0] == outs[1] and outs[0].strip()
