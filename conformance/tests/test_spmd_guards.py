"""Contract: the SPMD guard rails, in one process (no ranks needed).

- ``RankConstantCheckPass``: compiling a graph that has a runtime ``rank`` input and builds a small
  integer constant tensor warns by default and fails under ``NEURON_LIBTORCH_SPMD_STRICT=1`` with
  the node and its source line; an SPMD-clean graph compiles silently in both settings.
- The single-artifact check: every distinct graph collapsed to one hash directory holding every
  rank passes, however many graphs there are; a directory missing ranks is a splinter.
"""

from __future__ import annotations

import re
import warnings

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conformance.harness.properties import settings
from conformance.harness.tolerances import assert_close
from neuron_fixtures.spmd import EmbedMoE

STRICT = "NEURON_LIBTORCH_SPMD_STRICT"


def _moe(mpmd: bool):
    # rank 1 of 2 with group=None: the rank's local part only, no collective. The embedding
    # uses the runtime rank, so the rank is a graph input; the twin's MoE bakes its rank anyway.
    return EmbedMoE(1, 2, None, mpmd=mpmd).eval()


def _inputs(impl):
    return torch.randint(0, 128, (2, 3), generator=torch.Generator().manual_seed(3)), impl.spmd().rank_tensor(1)


@pytest.mark.parametrize("strict", ["0", "1"])
@pytest.mark.spec("002.guards.clean-compiles-silently")
def test_spmd_clean_layer_compiles_silently_in_both_settings(impl, monkeypatch, strict):
    monkeypatch.setenv(STRICT, strict)
    x, rank = _inputs(impl)
    layer = _moe(mpmd=False)
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        out = impl.compile(layer)(x, rank=rank)
    assert_close(out, layer(x), what="SPMD MoE")
    assert not [w for w in caught if "rank" in str(w.message).lower()], [str(w.message) for w in caught]


@pytest.mark.spec("002.guards.warn-by-default")
def test_mpmd_twin_warns_by_default(impl, monkeypatch):
    monkeypatch.delenv(STRICT, raising=False)
    x, rank = _inputs(impl)
    layer = _moe(mpmd=True)
    with pytest.warns(UserWarning) as caught, torch.no_grad():
        out = impl.compile(layer)(x, rank=rank)
    assert_close(out, layer(x), what="MPMD twin (tolerated)")
    text = "\n".join(str(w.message) for w in caught)
    assert "rank_id" in text and re.search(r"neuron_fixtures/spmd\.py:\d+", text), text


@pytest.mark.spec("002.guards.strict-flag", "002.guards.rank-constant-strict-raises")
def test_mpmd_twin_fails_under_strict_naming_node_and_line(impl, monkeypatch):
    monkeypatch.setenv(STRICT, "1")
    x, rank = _inputs(impl)
    with pytest.raises(Exception) as info, torch.no_grad():
        impl.compile(_moe(mpmd=True))(x, rank=rank)
    chain, exc = [], info.value
    while exc is not None:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    assert any(isinstance(e, impl.spmd().violation_errors()) for e in chain), [type(e).__name__ for e in chain]
    text = "\n".join(str(e) for e in chain)
    assert "rank_id" in text and re.search(r"neuron_fixtures/spmd\.py:\d+", text), text


@pytest.mark.spec("002.guards.rank-constant-detects")
def test_a_constant_without_a_rank_input_is_not_flagged(impl, monkeypatch):
    monkeypatch.setenv(STRICT, "1")

    def fn(x):
        return x + torch.tensor([[3]], dtype=torch.int32)

    x = torch.ones(2, 2, dtype=torch.int32)
    with torch.no_grad():
        assert torch.equal(impl.compile(fn)(x), fn(x))


@pytest.mark.spec("002.guards.num-graphs-agnostic")
def test_single_artifact_check_passes_a_model_with_many_graphs(impl):
    ranks = [0, 1, 2, 3]
    staged = {g: {f"hash-{g}": ranks} for g in ("prefill_8", "prefill_16", "decode_1", "decode_4", "vision_encoder")}
    assert impl.spmd().check_single_artifact(staged, strict=True) == []


@pytest.mark.spec("002.guards.splinter-strict-raises")
def test_single_artifact_check_names_the_splinters(impl):
    staged = {"prefill": {"aaaa": [0, 1, 2, 3]}, "decode": {"bbbb": [0, 2], "cccc": [1], "dddd": [3]}}
    with pytest.warns(UserWarning):
        assert len(impl.spmd().check_single_artifact(staged, strict=False)) == 3
    with pytest.raises(impl.spmd().violation_errors()) as info:
        impl.spmd().check_single_artifact(staged, strict=True)
    message = str(info.value)
    assert all(h in message for h in ("bbbb", "cccc", "dddd")) and "aaaa" not in message


@settings()
@given(world=st.integers(1, 8), graphs=st.integers(1, 5))
@pytest.mark.spec("002.guards.union-of-ranks")
def test_collapsed_graphs_never_splinter(impl, world, graphs):
    staged = {f"g{i}": {f"h{i}": list(range(world))} for i in range(graphs)}
    assert impl.spmd().check_single_artifact(staged, strict=True) == []


@settings()
@given(world=st.integers(2, 8), graphs=st.integers(1, 5), split=st.data())
@pytest.mark.spec("002.guards.union-of-ranks")
def test_one_graph_split_over_two_directories_always_splinters(impl, world, graphs, split):
    ranks = list(range(world))
    staged = {f"g{i}": {f"h{i}": ranks} for i in range(graphs)}
    cut = split.draw(st.integers(1, world - 1), label="cut")
    victim = split.draw(st.integers(0, graphs - 1), label="graph")
    staged[f"g{victim}"] = {"left": ranks[:cut], "right": ranks[cut:]}
    with pytest.raises(impl.spmd().violation_errors()):
        impl.spmd().check_single_artifact(staged, strict=True)


# --- every constant builder the seeds name, warn and strict ---------------------------------------------


def _baked_with_tensor(x, rank):
    return x + rank + torch.tensor([[3]], dtype=torch.int32)


def _baked_with_full(x, rank):
    return x + rank + torch.full((1, 1), 3, dtype=torch.int32)


BUILDERS = {"torch.tensor": _baked_with_tensor, "torch.full": _baked_with_full}


def _violation_chain(impl, exc):
    chain = []
    while exc is not None:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    return any(isinstance(e, impl.spmd().violation_errors()) for e in chain), "\n".join(str(e) for e in chain)


@pytest.mark.parametrize("builder", sorted(BUILDERS))
@pytest.mark.parametrize("strict", ["0", "1"], ids=["warn", "strict"])
@pytest.mark.spec("002.guards.rank-constant-detects", "002.guards.strict-flag")
def test_a_baked_rank_constant_is_caught_for_every_builder(impl, monkeypatch, builder, strict):
    monkeypatch.setenv(STRICT, strict)
    fn = BUILDERS[builder]
    x, rank = torch.ones(2, 2, dtype=torch.int32), impl.spmd().rank_tensor(1)
    line = re.escape(__file__.rsplit("/", 1)[-1]) + r":\d+"
    if strict == "1":
        with pytest.raises(Exception) as info, torch.no_grad():
            impl.compile(fn)(x, rank)
        is_violation, text = _violation_chain(impl, info.value)
        assert is_violation, f"{builder} under strict raised {type(info.value).__name__}, not a guard-rail violation: {text}"
        assert re.search(line, text), f"the violation does not name the source line: {text}"
    else:
        with pytest.warns(UserWarning) as caught, torch.no_grad():
            out = impl.compile(fn)(x, rank)
        assert torch.equal(out, fn(x, rank)), f"{builder}: the tolerated graph computes something else"
        text = "\n".join(str(w.message) for w in caught)
        assert re.search(line, text) and "rank" in text, f"the warning for {builder} does not name the line: {text}"


# --- strict holds at every seam, whatever the fallback setting --------------------------------------
#
# Under the strict flag a guard-rail violation reaches the caller as itself: not an eager fallback
# (TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0 runs failed graphs eagerly), not a warning, and not
# wrapped in another error type, so ``except <violation type>`` around the call catches it. Without
# the flag the same graph is tolerated (a warning naming the line) by every seam.

FALLBACK = "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"
SEAMS = ["neuron", "native", "capture", "parallel_trace"]


def _through_seam(impl, seam: str, tmp_path):
    """``run(fn, x, rank)`` compiling ``fn`` with one seam; returns its output (``None`` where the
    seam runs in a child and returns none)."""
    if seam == "neuron":
        return lambda fn, x, rank: impl.compile(fn)(x, rank)
    if seam == "native":
        name = impl.backend().names().get("native")
        if name is None:
            pytest.skip("the implementation declares no native backend (backend_names()['native'])")
        return lambda fn, x, rank: torch.compile(fn, backend=name, dynamic=False)(x, rank)
    if seam == "capture":
        return lambda fn, x, rank: impl.capture().capture_in_process(fn, cache_dir=str(tmp_path / "staged"))(x, rank)

    def trace(fn, x, rank):
        results = impl.capture().parallel_trace([(fn, {"x": x, "rank": rank}, None)], cache_dir=str(tmp_path / "staged"), workers=1)
        assert results[0]["ok"], results[0]["error"]
        return None

    return trace


@pytest.mark.parametrize("seam", SEAMS)
@pytest.mark.parametrize("fallback", ["on", "off"], ids=["fallback_on", "fallback_off"])
@pytest.mark.parametrize("strict", ["0", "1"], ids=["warn", "strict"])
@pytest.mark.spec("002.guards.strict-every-seam")
def test_strict_holds_at_every_seam_whatever_the_fallback(impl, monkeypatch, tmp_path, seam, fallback, strict):
    monkeypatch.setenv(STRICT, strict)
    monkeypatch.setenv(FALLBACK, "0" if fallback == "on" else "1")
    run = _through_seam(impl, seam, tmp_path)
    x, rank = torch.ones(2, 2, dtype=torch.int32), impl.spmd().rank_tensor(1)
    line = re.escape(__file__.rsplit("/", 1)[-1]) + r":\d+"
    if strict == "1":
        with warnings.catch_warnings(record=True) as caught, torch.no_grad():
            warnings.simplefilter("always")
            with pytest.raises(impl.spmd().violation_errors()) as info:  # the violation itself, unwrapped
                run(_baked_with_tensor, x, rank)
        text = str(info.value)
        assert "tensor" in text and re.search(line, text), f"{seam}: the violation names no node and line: {text}"
        assert not [w for w in caught if "eager" in str(w.message).lower()], (
            f"{seam}: the graph was also run eagerly: {[str(w.message) for w in caught]}"
        )
    elif seam == "parallel_trace":  # tolerated: the job stages its graph (its warnings stay in the child)
        with torch.no_grad():
            run(_baked_with_tensor, x, rank)
    else:
        with pytest.warns(UserWarning) as caught, torch.no_grad():
            out = run(_baked_with_tensor, x, rank)
        assert torch.equal(out, _baked_with_tensor(x, rank)), f"{seam}: the tolerated graph computes something else"
        text = "\n".join(str(w.message) for w in caught)
        assert re.search(line, text) and "rank" in text, f"{seam}: the warning does not name the line: {text}"


@pytest.mark.spec("002.rank.runtime-tensor")
def test_the_rank_is_a_zero_dimensional_int64_tensor_of_its_value(impl):
    """The runner threads the rank into every forward as a tensor (a runtime input, so every rank
    traces the same graph): a 0-d int64 tensor holding the rank, for any rank."""
    for rank in (0, 1, 7):
        t = impl.spmd().rank_tensor(rank)
        assert isinstance(t, torch.Tensor) and t.dim() == 0 and t.dtype == torch.int64, (rank, t)
        assert int(t) == rank
