"""Contract: the per-graph compiler-argument data flow, step by step, in both compile flows.

A policy model (``neuron_fixtures/policy.py``: decode and encoder at ``-O3``, jump-forward at ``-O2``,
prefill on the base arguments) is loaded by the implementation's runner once per flow:

* in-process: each compile site runs inside the scope its graph type resolves to;
* deferred: the worker's trace jobs carry the resolved list as their third element,
  ``parallel_trace`` stages the graphs in forked children, ``parallel_compile`` builds them into
  the artifact cache, and serving afterwards is a cache hit.

The same graph gets the same argument list, and so the same cache key, in both flows.

Every test keeps its caches under its own directory (``impl.cache().env``): the module's fixtures
compile into theirs, and a test that needs their warm cache works on a copy, so no test sees the
artifacts of another or depends on the order in which they run.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import time

import pytest
import torch

import neuron_fixtures
from conformance.harness.implementation import cache_entry_file
from conformance.harness.snapshots import JsonSnapshotExtension
from conformance.harness.tolerances import assert_close

# The module's fixtures compile the policy model's graphs once; --dist=loadgroup keeps the module on
# one xdist worker so they are not compiled again on the other.
pytestmark = [pytest.mark.contract("per-graph compiler arguments"), pytest.mark.xdist_group("compiler_args_flows")]

BASE = ["--model-type", "transformer", "--auto-cast", "none"]
TYPES = ("decode", "encoder", "jf", "prefill")


def _levels(args):
    toks = [t for a in args or [] for t in shlex.split(a)]
    out = []
    for i, t in enumerate(toks):
        if t in ("-O1", "-O2", "-O3"):
            out.append(int(t[2]))
        elif t == "--optlevel":
            out.append(int(toks[i + 1]))
        elif t.startswith("--optlevel="):
            out.append(int(t.split("=")[1]))
    return out


def _level(args):
    levels = _levels(args)
    return levels[-1] if levels else None


def _starts_with(args, prefix):
    return list(args[: len(prefix)]) == list(prefix)


def _use_caches(impl, mp: pytest.MonkeyPatch, root) -> None:
    """Point this process's caches at ``root`` (the adapter names the variables)."""
    for var, value in impl.cache().env(str(root)).items():
        mp.setenv(var, value)


@pytest.fixture(autouse=True)
def own_cache(impl, tmp_path, monkeypatch):
    """This test's caches: a fresh directory, nobody else's artifacts."""
    root = tmp_path / "own-caches"
    _use_caches(impl, monkeypatch, root)
    return root


def _copy_of(impl, monkeypatch, src, dest):
    """Use a copy of a fixture's warm caches (so the test cannot change what others read)."""
    shutil.copytree(src, dest)
    _use_caches(impl, monkeypatch, dest)


@pytest.fixture(scope="module")
def in_process(impl, tmp_path_factory):
    """Every graph type through its in-process compile site, into the fixture's own caches."""
    caches = tmp_path_factory.mktemp("in-process") / "caches"
    with pytest.MonkeyPatch.context() as mp:
        _use_caches(impl, mp, caches)
        runner = impl.compiler_args().policy_runner(compiler_args=BASE)
        out = {"runner": runner, "caches": caches}
        for g in (*TYPES, None):
            kwargs = runner.example(g)
            eager = runner.eager(g, runner.example(g))
            out[g] = {**runner.run(g, kwargs), "eager": eager, "resolved": runner.resolve(g)}
        impl.reset()
    return out


@pytest.fixture(scope="module")
def deferred(impl, in_process, tmp_path_factory):
    """The worker's trace jobs -> parallel_trace -> parallel_compile, into the fixture's own caches."""
    root = tmp_path_factory.mktemp("deferred")
    with pytest.MonkeyPatch.context() as mp:
        _use_caches(impl, mp, root / "caches")
        runner = impl.compiler_args().policy_runner(mode="capture", compiler_args=BASE)
        jobs = [runner.trace_job(g) for g in TYPES]
        traced = impl.capture().parallel_trace(jobs, cache_dir=str(root / "captured"), workers=2)
        compiled = impl.capture().parallel_compile(str(root / "captured"), workers=2, base_compiler_args=runner.base_compiler_args)
        impl.reset()
    return {"root": root, "caches": root / "caches", "jobs": jobs, "traced": dict(zip(TYPES, traced)),
            "compiled": compiled}


def _one_graph(record, what):
    graphs = record["graphs"]
    assert len(graphs) == 1, f"{what}: expected one compiled graph, got {graphs}"
    return graphs[0]


# --- in-process flow ---------------------------------------------------------------------------------


@pytest.mark.spec("000.runner.resolve-once-per-graph", "000.seams.three-seams", "000.flow.in-process-scope")
def test_decode_graph_gets_its_level_in_process(in_process):
    g = _one_graph(in_process["decode"], "decode")
    assert _level(g["compiler_args"]) == 3, g
    assert _starts_with(g["compiler_args"], in_process["decode"]["resolved"]), "the resolved list is not what compiled"


@pytest.mark.parametrize("graph_type,level", [("encoder", 3), ("jf", 2), ("prefill", None)])
@pytest.mark.spec("000.policy.signature", "000.policy.full-list")
def test_each_graph_type_compiles_with_its_policy_list(in_process, graph_type, level):
    g = _one_graph(in_process[graph_type], graph_type)
    assert _level(g["compiler_args"]) == level, g
    for flag in BASE:
        assert flag in g["compiler_args"], f"{graph_type}: base flag {flag} lost: {g['compiler_args']}"


@pytest.mark.spec("000.flow.encoder-model-scope", "000.runner.stamp-base-on-model")
def test_the_models_own_encoder_site_compiles_with_the_list_from_the_stamped_base(in_process):
    """The encoder site is the model's own (``embed_multimodal`` opens ``_scoped_compiler_args``):
    it can resolve only from the base arguments the runner stamped on the model, so its graph
    compiles with exactly the runner's resolution (the base, then ``-O3``), not without a scope."""
    resolved = in_process["runner"].resolve("encoder")
    g = _one_graph(in_process["encoder"], "encoder")
    assert resolved is not None and _starts_with(resolved, BASE) and _level(resolved) == 3, resolved
    assert _starts_with(g["compiler_args"], resolved), (
        f"the encoder graph compiled with {g['compiler_args']}, the model's scope over the stamped base gives {resolved}")


@pytest.mark.spec("000.policy.example-inputs-none")
def test_the_runner_hands_the_policy_no_example_inputs(impl):
    """A policy that refuses example inputs (``no_example_inputs``) resolves every graph type: the
    runner passed ``None``, and the policy chose by graph type alone."""
    runner = impl.compiler_args().policy_runner(policy="no_example_inputs", compiler_args=BASE)
    got = {g: runner.resolve(g) for g in TYPES}
    assert {g: _level(a) for g, a in got.items()} == {"decode": 3, "encoder": 3, "jf": 2, "prefill": None}, got


@pytest.mark.spec("000.flow.native-two-element-jobs", "000.flow.trace-job-third-element")
def test_native_trace_jobs_have_two_elements_and_the_others_three(impl):
    """The native path keeps the two-element ``(model, kwargs)`` job (it resolves in-process); the
    capture path's job carries the resolved list as its third element."""
    native = impl.compiler_args().policy_runner(mode="native", compiler_args=BASE).trace_job("decode")
    captured = impl.compiler_args().policy_runner(mode="capture", compiler_args=BASE)
    assert len(native) == 2 and isinstance(native[1], dict), f"the native job is {len(native)} elements: {native[2:]}"
    job = captured.trace_job("decode")
    assert len(job) == 3 and job[2] == captured.resolve("decode"), job[2:]


@pytest.mark.slow  # a decode graph compiled for it alone (about 10 s of a core)
@pytest.mark.spec("000.seams.before-platform-args")
def test_platform_flags_are_added_after_the_scoped_list(impl, monkeypatch):
    """The scope replaces ``compiler_args`` first, then the platform's flags (``NEURON_CC_FLAGS``)
    are added: a graph compiled under a scope keeps both, the scoped list first. Applied the other
    way round, the scope would replace the platform's flags."""
    monkeypatch.setenv("NEURON_CC_FLAGS", "--lnc 2")
    runner = impl.compiler_args().policy_runner(compiler_args=BASE)
    g = _one_graph(runner.run("decode"), "decode")
    args, resolved = g["compiler_args"], runner.resolve("decode")
    assert _starts_with(args, resolved), f"compiled with {args}; the scope gave {resolved}"
    tail = [t for a in args[len(resolved):] for t in shlex.split(a)]
    assert "--lnc" in tail and tail[tail.index("--lnc") + 1] == "2", f"NEURON_CC_FLAGS's --lnc 2 is not after the scoped list: {args}"


@pytest.mark.spec("000.policy.graph-type-labels", "000.runner.base-args-on-options", "000.runner.resolve-none")
def test_untagged_graph_keeps_the_base_arguments(in_process):
    assert in_process[None]["resolved"] is None
    g = _one_graph(in_process[None], "untagged")
    assert _starts_with(g["compiler_args"], BASE) and _level(g["compiler_args"]) is None, g


@pytest.mark.spec("000.seams.apply-before-hash", "000.key.distinct-args-own-neff")
def test_graphs_with_different_lists_get_different_keys(in_process):
    keys = {g: _one_graph(in_process[g], str(g))["cache_key"] for g in (*TYPES, None)}
    assert len(set(keys.values())) == len(keys), keys


@pytest.mark.parametrize("graph_type", [*TYPES, None])
@pytest.mark.spec("000.flow.in-process-scope")
def test_in_process_outputs_match_eager(in_process, graph_type):
    assert_close(in_process[graph_type]["outputs"], in_process[graph_type]["eager"], what=str(graph_type))


@pytest.mark.spec("000.sites.spec-verify")
def test_the_spec_verify_site_compiles_with_its_own_policy_branch(impl):
    runner = impl.compiler_args().policy_runner(compiler_args=BASE)
    resolved = runner.resolve("spec_verify")
    assert resolved is not None and _level(resolved) == 1, resolved  # the fixture's branch for spec_verify
    kwargs = runner.example("spec_verify")
    record = runner.run("spec_verify", kwargs)
    g = _one_graph(record, "spec_verify")
    assert _starts_with(g["compiler_args"], resolved), "the spec_verify site did not compile with its resolved list"
    assert_close(record["outputs"], runner.eager("spec_verify", runner.example("spec_verify")), what="spec_verify")


@pytest.mark.spec("000.precedence.explicit-level-wins")
def test_explicit_caller_level_disables_the_policy_for_every_graph(impl):
    runner = impl.compiler_args().policy_runner(compiler_args=BASE, optimization_level=2)
    assert _level(runner.base_compiler_args) == 2
    for g in (*TYPES, None):
        assert runner.resolve(g) is None, f"{g}: the policy ran although the caller set a level"
        job = runner.trace_job(g)
        assert len(job) == 3 and job[2] is None, f"{g}: the trace job carries {job[2:]}"
    graph = _one_graph(runner.run("decode"), "decode")
    assert _level(graph["compiler_args"]) == 2, graph


# --- deferred flow -----------------------------------------------------------------------------------


@pytest.mark.capability("capture")
@pytest.mark.spec("000.seams.three-seams", "000.flow.capture-records-args")
def test_a_staged_graph_records_the_list_its_site_resolved(impl, tmp_path):
    """One trace job on its own: the capture seam stages the decode graph with the list the site
    resolved (level 3 on the base arguments), in what it reports and in the staged metadata."""
    runner = impl.compiler_args().policy_runner(mode="capture", compiler_args=BASE)
    cache_dir = str(tmp_path / "captured")
    (traced,) = impl.capture().parallel_trace([runner.trace_job("decode")], cache_dir=cache_dir, workers=1)
    assert traced["ok"], traced["error"]
    (captured,) = traced["captured"]
    assert _level(captured["compiler_args"]) == 3 and _starts_with(captured["compiler_args"], BASE), (
        f"captured compiler_args {captured['compiler_args']}, resolved {runner.resolve('decode')}"
    )
    staged = {m["cache_key"]: m for m in impl.capture().staged_metadata(cache_dir)}
    assert staged.get(captured["cache_key"], {}).get("compiler_args") == captured["compiler_args"], (
        f"the staged metadata does not record the list: {staged}"
    )


@pytest.mark.capability("capture")
@pytest.mark.spec("000.flow.trace-job-third-element")
def test_trace_jobs_carry_the_resolved_list(deferred, in_process):
    for g, job in zip(TYPES, deferred["jobs"]):
        assert len(job) == 3
        assert job[2] == in_process[g]["resolved"], g


@pytest.mark.capability("capture")
@pytest.mark.spec("000.flow.same-list-both-flows", "000.stability.warmup-serve-same-key", "000.sites.decode-warmup-and-forward")
def test_decode_graph_gets_the_same_list_and_key_in_both_flows(deferred, in_process):
    traced = deferred["traced"]["decode"]
    assert traced["ok"], traced["error"]
    (captured,) = traced["captured"]
    inproc = _one_graph(in_process["decode"], "decode")
    assert captured["compiler_args"] == inproc["compiler_args"]
    assert captured["cache_key"] == inproc["cache_key"]


@pytest.mark.capability("capture")
@pytest.mark.parametrize("graph_type", ["encoder", "jf", "prefill"])
@pytest.mark.spec("000.seams.apply-before-hash", "000.flow.same-list-both-flows")
def test_every_graph_keys_the_same_in_both_flows(deferred, in_process, graph_type):
    traced = deferred["traced"][graph_type]
    assert traced["ok"], traced["error"]
    (captured,) = traced["captured"]
    assert captured["cache_key"] == _one_graph(in_process[graph_type], graph_type)["cache_key"]


@pytest.mark.capability("capture")
@pytest.mark.spec("000.flow.parallel-compile-reads-args")
def test_parallel_compile_reads_the_recorded_lists(deferred, in_process):
    by_key = {r["cache_key"]: r for r in deferred["compiled"]}
    assert all(r["ok"] for r in deferred["compiled"]), deferred["compiled"]
    for g in TYPES:
        key = _one_graph(in_process[g], g)["cache_key"]
        assert key in by_key, f"{g}: parallel_compile did not build key {key}"
        assert by_key[key]["args_source"] == "recorded"
        assert _level(by_key[key]["compiler_args"]) == _level(_one_graph(in_process[g], g)["compiler_args"])


@pytest.mark.capability("capture")
@pytest.mark.spec("000.flow.deferred-build", "000.stability.warmup-serve-same-key")
def test_serving_after_parallel_compile_is_a_cache_hit(impl, deferred, monkeypatch, tmp_path):
    _copy_of(impl, monkeypatch, deferred["caches"], tmp_path / "served")
    monkeypatch.setenv("NEURON_LIBTORCH_ASSERT_CACHE_HIT", "1")
    runner = impl.compiler_args().policy_runner(compiler_args=BASE)
    for g in ("decode", "encoder"):
        kwargs = runner.example(g)
        result = runner.run(g, kwargs)  # raises on a miss
        assert _level(_one_graph(result, g)["compiler_args"]) == 3
        assert_close(result["outputs"], runner.eager(g, runner.example(g)), what=g)


@pytest.mark.capability("capture")
@pytest.mark.spec("000.flow.child-opens-scope", "000.sites.no-model-code-in-libtorch")
def test_forked_children_see_their_own_jobs_arguments(impl, deferred, tmp_path):
    model, kwargs, _ = deferred["jobs"][TYPES.index("prefill")]
    jobs = [(model, kwargs, [*BASE, "-O2"]), (model, kwargs, [*BASE, "-O3", "--auto-cast", "all"]), (model, kwargs)]
    results = impl.capture().parallel_trace(jobs, cache_dir=str(tmp_path / "cap"), workers=2)
    assert [r["ok"] for r in results] == [True, True, True], [r["error"] for r in results]
    got = [r["captured"][0]["compiler_args"] for r in results]
    assert _level(got[0]) == 2 and _level(got[1]) == 3 and "all" in got[1]
    assert _level(got[2]) is None and _starts_with(got[2], BASE), "the two-element job ran under a scope"
    assert len({r["captured"][0]["cache_key"] for r in results}) == 3


def _hang(**_):
    time.sleep(600)


def _crash(**_):
    os._exit(3)


def _raise(**_):
    raise RuntimeError("boom in the traced model")


@pytest.mark.capability("capture")
def test_a_failing_child_is_reported_with_its_job_and_never_hangs(impl, deferred, tmp_path):
    model, kwargs, args = deferred["jobs"][TYPES.index("prefill")]
    jobs = [(_raise, {}, ["-O2"]), (model, kwargs, args), (_crash, {}, None), (_hang, {})]
    start = time.monotonic()
    results = impl.capture().parallel_trace(jobs, cache_dir=str(tmp_path / "cap"), workers=2, timeout=10)
    assert time.monotonic() - start < 590, "the parent waited for the hanging child"
    assert [r["ok"] for r in results] == [False, True, False, False], results
    assert "boom in the traced model" in results[0]["error"]
    assert len({r["identity"] for r in results}) == 4, "job identities are not distinct"
    for i in (0, 2, 3):
        assert str(i) in results[i]["identity"] and results[i]["error"], results[i]


@pytest.mark.capability("capture")
@pytest.mark.spec("000.flow.old-cache-base-args")
def test_old_cache_directory_compiles_with_the_base_arguments(impl, tmp_path):
    old = impl.capture().legacy_capture_dir(str(tmp_path / "old"))
    staged = impl.capture().staged_metadata(old)
    assert staged and all(m.get("compiler_args") is None for m in staged)
    records = impl.capture().parallel_compile(old, workers=1, base_compiler_args=[*BASE, "-O2"])
    assert records and all(r["ok"] for r in records), records
    for r in records:
        assert r["args_source"] == "base"
        assert _starts_with(r["compiler_args"], [*BASE, "-O2"]), r


@pytest.mark.capability("capture")
@pytest.mark.spec("000.flow.parallel-compile-reads-cache-dir")
def test_parallel_compile_of_a_directory_that_does_not_exist_is_an_error_naming_it(impl, tmp_path):
    # a typo in a staging path must not pass as "nothing to build" and surface as cache misses later
    missing = tmp_path / "captured-typo"
    with pytest.raises(Exception, match=re.escape(str(missing))):
        impl.capture().parallel_compile(str(missing), workers=1)


# --- guards ------------------------------------------------------------------------------------------


@pytest.mark.spec("000.stability.outside-scope-base-args", "000.stability.assert-cache-hit")
def test_serve_time_compile_outside_the_scope_is_caught(impl, in_process, monkeypatch, tmp_path):
    _copy_of(impl, monkeypatch, in_process["caches"], tmp_path / "warm")
    runner = impl.compiler_args().policy_runner(compiler_args=BASE)
    runner.run("decode")  # warm-up inside the scope (a cache hit from the in-process flow)
    impl.reset()
    monkeypatch.setenv("NEURON_LIBTORCH_ASSERT_CACHE_HIT", "1")
    hit = runner.run("decode")
    assert _one_graph(hit, "decode")["cache_key"] == _one_graph(in_process["decode"], "decode")["cache_key"]
    impl.reset()
    with pytest.raises(Exception) as info:
        runner.run_unscoped("decode")
    assert "NEURON_LIBTORCH_ASSERT_CACHE_HIT" in str(info.value)


@pytest.mark.spec("000.seams.three-seams", "000.stability.native-assert-cache-key-args")
def test_nondeterministic_policy_is_detected_by_the_native_seam(impl):
    runner = impl.compiler_args().policy_runner(policy="nondeterministic", mode="native", compiler_args=BASE)
    first = runner.run("decode")
    assert _level(_one_graph(first, "decode")["compiler_args"]) == 3
    impl.reset()
    with pytest.raises(Exception) as info:
        runner.run("decode")  # the policy now answers -O2 for the same graph
    msg = str(info.value)
    assert "-O2" in msg and "-O3" in msg, msg


@pytest.mark.spec("000.policy.deterministic", "000.stability.changed-args-recompile")
def test_nondeterministic_policy_misses_the_cache_after_warmup(impl, in_process, monkeypatch, tmp_path):
    _copy_of(impl, monkeypatch, in_process["caches"], tmp_path / "warm")
    runner = impl.compiler_args().policy_runner(policy="nondeterministic", compiler_args=BASE)
    runner.run("decode")  # -O3: the same list the deterministic policy warmed
    impl.reset()
    monkeypatch.setenv("NEURON_LIBTORCH_ASSERT_CACHE_HIT", "1")
    with pytest.raises(Exception) as info:
        runner.run("decode")  # -O2: a new key
    assert "NEURON_LIBTORCH_ASSERT_CACHE_HIT" in str(info.value)


# --- metadata ----------------------------------------------------------------------------------------


def _reviewable(meta: dict) -> dict:
    """The metadata without what depends on the machine or the process (key, versions, name)."""
    drop = {"cache_key", "versions", "graph_name", "compile_time_us", "artifact_sha256", "artifact_size"}
    out = {k: v for k, v in meta.items() if k not in drop}
    if "key_components" in out:
        out["key_components"] = {k: v for k, v in out["key_components"].items() if k != "versions"}
    return out


@pytest.mark.capability("capture")
@pytest.mark.parametrize("graph_type", ["decode", "jf"])
@pytest.mark.spec("000.flow.capture-records-args")
def test_staged_metadata_snapshot(impl, deferred, graph_type, snapshot):
    key = deferred["traced"][graph_type]["captured"][0]["cache_key"]
    metas = {m["cache_key"]: m for m in impl.capture().staged_metadata(str(deferred["root"] / "captured"))}
    assert key in metas
    assert metas[key]["graph_name"]
    assert _reviewable(metas[key]) == snapshot.use_extension(JsonSnapshotExtension)


# --- levels do not change results ----------------------------------------------------------------------


@pytest.mark.slow  # two compiles of its own (about 6 s of a core)
@pytest.mark.spec("000.precedence.compiler-default-o1")
def test_a_list_without_a_level_compiles_as_O1(impl, own_cache):
    """With no level in the list the compiler runs at its default, ``-O1``: the artifact is the one
    ``-O1`` gives, byte for byte (levels give different artifacts: the test below)."""
    model, args = neuron_fixtures.build("mlp")
    artifacts = {}
    for label, compiler_args in (("no level", ["--model-type", "transformer"]), ("-O1", ["--model-type", "transformer", "-O1"])):
        before = set(impl.cache().keys(str(own_cache)))
        impl.reset()
        with torch.no_grad():
            impl.compile(model, options={"compiler_args": compiler_args})(*args)
        new = sorted(set(impl.cache().keys(str(own_cache))) - before)
        assert new, f"{label}: nothing was published"
        artifacts[label] = tuple(open(cache_entry_file(impl, own_cache, k, 0), "rb").read() for k in new)
    assert artifacts["no level"] == artifacts["-O1"], "a list without a level did not compile as -O1"


@pytest.mark.parametrize("name", ["mlp", "vision_encoder"])
@pytest.mark.spec("000.helper.levels-reach-compiler")
def test_optimization_levels_reach_the_compiler_and_give_equal_outputs(impl, own_cache, name):
    """Each level compiles to a different artifact (the level reached the compiler) with the same
    outputs (the level changed how, not what)."""
    model, args = neuron_fixtures.build(name)
    artifacts, outs = {}, {}
    with torch.no_grad():
        expected = model(*args)
        for level in (1, 2, 3):
            before = set(impl.cache().keys(str(own_cache)))
            impl.reset()
            compiled = impl.compile(model, options={"compiler_args": [f"-O{level}"]})
            outs[level] = compiled(*args)
            new = sorted(set(impl.cache().keys(str(own_cache))) - before)
            assert new, f"{name} at -O{level}: nothing was published"
            # role 0 is the artifact; an entry the adapter cannot describe ([]) has none to compare: a skip
            artifacts[level] = tuple(open(cache_entry_file(impl, own_cache, k, 0), "rb").read() for k in new)
    for level, out in outs.items():
        assert_close(out, expected, what=f"{name} at -O{level}")
    assert_close(outs[3], outs[1], what=f"{name}: -O3 vs -O1")
    same = [(a, b) for a in (1, 2, 3) for b in (1, 2, 3) if a < b and artifacts[a] == artifacts[b]]
    assert not same, f"{name}: identical artifacts at levels {same}: the level did not reach the compiler"
