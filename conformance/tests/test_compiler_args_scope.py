"""Contract: the per-graph compiler-argument scope, the level helper, and bad policy input.

``scoped_compiler_args`` is a context variable: nested scopes restore the outer value, an exception
restores it too, and threads and asyncio tasks never see each other's scopes.
``with_optimization_level`` is pure and replaces the level in whatever form it is written.
"""

from __future__ import annotations

import asyncio
import shlex
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.harness.properties import settings

pytestmark = pytest.mark.contract("per-graph compiler arguments")

OPTS = {"compiler_args": ["--target", "trn2"], "enable_fx_passes": True}


def _scoped(impl):
    return impl.compiler_args().apply_scoped_compiler_args(OPTS)["compiler_args"]


@pytest.mark.spec("000.scope.apply-without-scope")
def test_no_scope_leaves_options_unchanged(impl):
    assert impl.compiler_args().apply_scoped_compiler_args(OPTS) == OPTS
    assert impl.compiler_args().apply_scoped_compiler_args(None) in ({}, None)


@pytest.mark.spec("000.scope.context-manager", "000.scope.apply-replaces")
def test_scope_replaces_compiler_args_and_keeps_other_options(impl):
    with impl.compiler_args().scoped_compiler_args(["-O3", "--target", "trn2"]):
        got = impl.compiler_args().apply_scoped_compiler_args(OPTS)
    assert got["compiler_args"] == ["-O3", "--target", "trn2"]
    assert got["enable_fx_passes"] is True
    assert OPTS["compiler_args"] == ["--target", "trn2"], "the caller's options were modified"


@pytest.mark.spec("000.scope.none-is-no-override")
def test_none_scope_is_no_override(impl):
    with impl.compiler_args().scoped_compiler_args(None):
        assert _scoped(impl) == ["--target", "trn2"]


@pytest.mark.spec("000.scope.restored-on-exit")
def test_nested_scopes_restore_the_outer_value(impl):
    with impl.compiler_args().scoped_compiler_args(["-O2"]):
        with impl.compiler_args().scoped_compiler_args(["-O3"]):
            assert _scoped(impl) == ["-O3"]
        assert _scoped(impl) == ["-O2"]
        with impl.compiler_args().scoped_compiler_args(None):
            assert _scoped(impl) == ["--target", "trn2"]
        assert _scoped(impl) == ["-O2"]
    assert _scoped(impl) == ["--target", "trn2"]


@pytest.mark.spec("000.scope.restored-on-exit")
def test_an_exception_inside_restores_the_scope(impl):
    with impl.compiler_args().scoped_compiler_args(["-O2"]):
        with pytest.raises(RuntimeError):
            with impl.compiler_args().scoped_compiler_args(["-O3"]):
                raise RuntimeError("inside")
        assert _scoped(impl) == ["-O2"]
    assert _scoped(impl) == ["--target", "trn2"]


@pytest.mark.spec("000.scope.context-manager")
def test_threads_do_not_see_each_others_scopes(impl):
    barrier = threading.Barrier(2, timeout=30)
    seen: dict[str, list] = {}

    def worker(name, args):
        with impl.compiler_args().scoped_compiler_args(args):
            barrier.wait()  # both scopes are open at once
            seen[name] = _scoped(impl)
            barrier.wait()

    threads = [threading.Thread(target=worker, args=("a", ["-O2"])), threading.Thread(target=worker, args=("b", ["-O3"]))]
    with impl.compiler_args().scoped_compiler_args(["-O1"]):
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert _scoped(impl) == ["-O1"]
    assert seen == {"a": ["-O2"], "b": ["-O3"]}


@pytest.mark.spec("000.scope.context-manager")
def test_asyncio_tasks_do_not_see_each_others_scopes(impl):
    async def task(args, rounds):
        out = []
        with impl.compiler_args().scoped_compiler_args(args):
            for _ in range(rounds):
                await asyncio.sleep(0)  # let the other task run inside its own scope
                out.append(_scoped(impl))
        return out

    async def main():
        return await asyncio.gather(task(["-O2"], 3), task(["-O3"], 3), task(None, 3))

    a, b, c = asyncio.run(main())
    assert a == [["-O2"]] * 3 and b == [["-O3"]] * 3 and c == [["--target", "trn2"]] * 3


# --- with_optimization_level ------------------------------------------------------------------------

_OTHER = [["--target", "trn2"], ["--auto-cast", "all"], ["--lnc=2"], ["--enable-saturate-infinity"],
          ["--model-type", "transformer"], ["--target trn3"]]
_LEVEL = [["-O1"], ["-O2"], ["-O3"], ["--optlevel", "2"], ["--optlevel=3"], ["--optlevel 1"],
          ["-O2 --auto-cast matmult"], ["--target trn2 -O3"]]


def _tokens(args):
    return [t for item in args for t in shlex.split(item)]


def _split_levels(args):
    """(levels stated, every other token in order)."""
    toks, levels, other, i = _tokens(args), [], [], 0
    while i < len(toks):
        t = toks[i]
        if t in ("-O1", "-O2", "-O3"):
            levels.append(int(t[2]))
        elif t == "--optlevel":
            levels.append(int(toks[i + 1]))
            i += 1
        elif t.startswith("--optlevel="):
            levels.append(int(t.split("=")[1]))
        else:
            other.append(t)
        i += 1
    return levels, other


arg_lists = st.lists(st.sampled_from(_OTHER + _LEVEL), max_size=6).map(lambda parts: [x for p in parts for x in p])


@settings(max_examples=200)
@given(args=arg_lists, level=st.sampled_from([1, 2, 3]))
@pytest.mark.spec("000.helper.with-optimization-level", "000.helper.pure")
def test_level_is_replaced_in_any_form_and_other_flags_keep_their_order(impl, args, level):
    before = list(args)
    out = impl.compiler_args().with_optimization_level(args, level)
    assert args == before, "with_optimization_level modified its input"
    levels, other = _split_levels(out)
    assert levels == [level], f"{args} -> {out}: expected exactly one level {level}"
    assert other == _split_levels(args)[1], f"{args} -> {out}: other flags changed"


@settings(max_examples=100)
@given(args=arg_lists, a=st.sampled_from([1, 2, 3]), b=st.sampled_from([1, 2, 3]))
@pytest.mark.spec("000.helper.with-optimization-level")
def test_level_helper_composes(impl, args, a, b):
    assert impl.compiler_args().with_optimization_level(impl.compiler_args().with_optimization_level(args, a), b) == impl.compiler_args().with_optimization_level(args, b)


@pytest.mark.spec("000.helper.with-optimization-level")
def test_level_helper_keeps_unrelated_items_verbatim(impl):
    assert impl.compiler_args().with_optimization_level(["--target", "trn2", "-O1", "--auto-cast", "all"], 3) == [
        "--target", "trn2", "-O3", "--auto-cast", "all"]
    assert impl.compiler_args().with_optimization_level([], 2) == ["-O2"]


@pytest.mark.parametrize("level", [0, 4, 7, "3", None, 2.0, True])
@pytest.mark.spec("000.helper.with-optimization-level")
def test_malformed_level_is_refused(impl, level):
    with pytest.raises(Exception) as info:
        impl.compiler_args().with_optimization_level(["--target", "trn2"], level)
    assert "level" in str(info.value).lower() or "-O" in str(info.value)


def test_malformed_level_already_in_the_list_is_refused(impl):
    with pytest.raises(Exception) as info:
        impl.compiler_args().with_optimization_level(["-O7"], 3)
    assert "-O7" in str(info.value)


# --- bad policy input, named by graph type ----------------------------------------------------------


@pytest.mark.spec("000.scope.concrete-list-only")
def test_policy_returning_a_string_names_the_graph_type(impl):
    runner = impl.compiler_args().policy_runner(policy="returns_string", compiler_args=["--target", "trn2"])
    with pytest.raises(Exception) as info:
        runner.resolve("decode")
    assert "decode" in str(info.value) and "list" in str(info.value)


def test_policy_with_a_malformed_level_names_the_graph_type(impl):
    runner = impl.compiler_args().policy_runner(policy="malformed_level")
    with pytest.raises(Exception) as info:
        runner.resolve("encoder")
    assert "encoder" in str(info.value) and "-O9" in str(info.value)


@pytest.mark.parametrize("bad", ["", 7], ids=["empty", "not-a-string"])
@pytest.mark.spec("000.policy.graph-type-labels")
def test_a_graph_type_that_is_not_one_is_refused_naming_it(impl, bad):
    """Graph types are open (seed 000: "decode", "encoder", "and so on"), but a compile site must
    name its graph with a non-empty string (or None): anything else is refused, naming the value."""
    for runner in (impl.compiler_args().policy_runner(), impl.compiler_args().policy_runner(optimization_level=2)):
        with pytest.raises(Exception) as info:
            runner.resolve(bad)
        assert repr(bad) in str(info.value)


@pytest.mark.spec("000.policy.add-or-remove-flags", "000.sites.jump-forward")
def test_a_graph_type_of_the_models_own_reaches_its_policy(impl):
    """A type the runner has no site of its own for ("vision") is resolved by the model's policy
    like any other: the fixture policy gives such a type the base arguments."""
    runner = impl.compiler_args().policy_runner(compiler_args=["--model-type", "transformer"])
    assert runner.resolve("vision") == runner.resolve("prefill")
    assert runner.resolve("decode") != runner.resolve("vision"), "the policy's own types keep their arguments"


@pytest.mark.parametrize("job", [("only-model",), (print, {}, None, "extra"), "not a tuple"])
@pytest.mark.spec("000.flow.trace-job-third-element", "000.sites.no-model-code-in-libtorch")
def test_trace_job_of_the_wrong_shape_names_the_job(impl, tmp_path, job):
    good = (print, {}, ["-O2"])
    with pytest.raises(Exception) as info:
        impl.capture().parallel_trace([good, job], cache_dir=str(tmp_path / "cap"))
    msg = str(info.value)
    assert "job 1" in msg, msg
    assert not (tmp_path / "cap").exists() or not any((tmp_path / "cap").iterdir()), "a job ran before validation"
