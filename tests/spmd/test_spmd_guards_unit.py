"""The guard-rail functions on their own: strict flag handling, messages, splinter detection."""

from __future__ import annotations

import pytest
import torch

from reference.core import env
from reference.spmd.errors import RankConstantError, SplinterError
from reference.spmd.guards import SPMDWarning, check_rank_constants, check_single_artifact, find_splinters


def _graph_with_rank_constant():
    def fn(x, rank):
        return x + rank + torch.full((1, 1), 2, dtype=torch.int64)

    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=backend)(torch.ones(2, 2, dtype=torch.int64), torch.tensor(1))
    torch._dynamo.reset()
    return graphs[0]


def test_rank_constant_warns_by_default_and_raises_under_strict():
    gm = _graph_with_rank_constant()
    with _unset(env.SPMD_STRICT):
        with pytest.warns(SPMDWarning, match="torch.full"):
            found = check_rank_constants(gm, graph_name="g", strict=False)
    assert [f.builder for f in found] == ["torch.full"]
    with pytest.raises(RankConstantError, match="NEURON_LIBTORCH_SPMD_STRICT=1") as info:
        check_rank_constants(gm, graph_name="g", strict=True)
    assert "graph 'g'" in str(info.value) and "test_spmd_guards_unit.py" in str(info.value)


class _unset:
    def __init__(self, name):
        self.name = name

    def __enter__(self):
        import os

        self.old = os.environ.pop(self.name, None)

    def __exit__(self, *exc):
        import os

        if self.old is not None:
            os.environ[self.name] = self.old


@pytest.mark.spec("002.guards.strict-flag")
def test_strict_flag_comes_from_the_environment(monkeypatch):
    # The guards take the flag; the entry points read NEURON_LIBTORCH_SPMD_STRICT when called:
    # parallel_compile's registered check, and the seeds' keyword entry of the passes.
    from reference.flows.staged_build import check_staged_graphs
    from reference.fx_passes import PassContext

    staged = {"decode": {"a": [0], "b": [1]}}
    with pytest.raises(SplinterError) as info:
        check_single_artifact(staged, strict=True)
    assert {s.key for s in info.value.splinters} == {"a", "b"}
    with pytest.warns(SPMDWarning):
        assert len(check_single_artifact(staged, strict=False)) == 2
    seen = []
    monkeypatch.setattr("reference.flows.staged_build.check_staged_groups", lambda groups, *, strict: seen.append(strict))
    for value, strict in (("1", True), ("0", False)):
        monkeypatch.setenv(env.SPMD_STRICT, value)
        check_staged_graphs({})
        assert PassContext.of(graph_name="g").spmd_strict is strict
    assert seen == [True, False]


@pytest.mark.spec("002.guards.union-of-ranks")
def test_union_of_ranks_is_taken_across_graphs():
    # decode alone looks collapsed, but rank 3 staged prefill: decode is missing it.
    staged = {"prefill": {"p": [0, 1, 2, 3]}, "decode": {"d": [0, 1, 2]}}
    [s] = find_splinters(staged)
    assert (s.graph, s.key, s.missing) == ("decode", "d", (3,))


def test_staged_groups_read_rank_markers(tmp_path):
    """Staged entries are stand-ins with the attributes parallel_compile's entries have (key, path)."""
    from types import SimpleNamespace

    from reference.spmd.guards import check_staged_groups, mark_staged_rank

    def entry(key, ranks):
        d = tmp_path / key
        for r in ranks:
            mark_staged_rank(str(d), r)
        return SimpleNamespace(key=key, path=str(d), metadata=None)

    collapsed = {"prefill": [entry("p", [0, 1, 2, 3])], "decode": [entry("d", [0, 1, 2, 3])]}
    assert check_staged_groups(collapsed, strict=True) == []
    fanned = {"prefill": [entry("p0", [0, 1]), entry("p1", [2, 3])]}
    with pytest.raises(SplinterError, match="p0"):
        check_staged_groups(fanned, strict=True)
    # a single-process capture records no ranks: nothing to check
    assert check_staged_groups({"g": [SimpleNamespace(key="k", path=str(tmp_path / "none"), metadata=None)]}, strict=True) == []


def test_a_splinter_names_where_the_staged_texts_first_differ(tmp_path):
    """Stand-in entries as above, with the staged text (``hlo``) that parallel_compile's entries carry."""
    from types import SimpleNamespace

    from reference.spmd.guards import check_staged_groups, first_difference, mark_staged_rank

    body = "module {{\n  func.func @main(%arg0: tensor<2xi32>) -> tensor<2xi32> {{\n    %c = stablehlo.constant dense<{}> : tensor<2xi32>\n  }}\n}}\n"

    def entry(key, rank):
        mark_staged_rank(str(tmp_path / key), rank)
        return SimpleNamespace(key=key, path=str(tmp_path / key), metadata=None, hlo=body.format(rank))

    with pytest.raises(SplinterError) as info:
        check_staged_groups({"decode": [entry("k0", 0), entry("k1", 1)]}, strict=True)
    assert ("graph 'decode': hashes k0 and k1 first differ at line 3 of the staged text:\n"
            "      %c = stablehlo.constant dense<0> : tensor<2xi32>\n"
            "      %c = stablehlo.constant dense<1> : tensor<2xi32>") in str(info.value)
    assert first_difference("a\nb", "a\nb") is None
    assert first_difference("a", "a\nb") == (2, "<end of text>", "b")
