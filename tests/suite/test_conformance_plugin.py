"""The conformance plugin as another project sees it: real pytest runs in fresh processes.

Each test writes a small adapter (a subclass of the reference's, with parts raising NotSupported or
broken on purpose) into a temporary project and runs ``pytest --pyargs conformance...`` there, the
way an implementer would, then checks the outcomes, reports and snapshot trees it left.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

import conformance
from conformance.harness.forkserver import ForkServer, run_module
from conformance.harness.implementation import CAPABILITIES

REPO = Path(conformance.__file__).resolve().parent.parent


# What each run's process starts with: the pytest runs fork from a server that has imported torch
# and Dynamo (conformance/harness/forkserver.py; about 3 s of each run's start), one per module and
# xdist worker; nothing of the suite or the implementation is imported before the run.
PRELOAD = ("torch", "torch._dynamo")
_server: ForkServer | None = None


def _env(project: Path | None, extra: dict | None = None) -> dict[str, str]:
    # A clean slate: nothing a surrounding run of the suite may have set (its scratch caches).
    dropped = ("CONFORMANCE_", "PYTEST_XDIST", "TORCH_NEURONX_", "NEURON_")
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    full_env["PYTHONPATH"] = os.pathsep.join([str(REPO), *([str(project)] if project else [])])
    full_env.update(extra or {})
    return full_env


@pytest.fixture(scope="module", autouse=True)
def _fork_server():
    global _server
    with ForkServer(PRELOAD, env=_env(None), interpreters=1) as _server:
        yield
    _server = None


def _run(project: Path, *args: str, env: dict | None = None, fresh: bool = False) -> subprocess.CompletedProcess:
    """``python -m pytest ARGS`` in ``project``, forked from the module's server unless ``fresh``
    (a run that must not start with torch imported) or ``env`` sets what the server read at start."""
    args = ["-p", "no:cacheprovider", "-p", "no:xdist", "-o", "addopts=", "-q", "-rsx", *args]
    return run_module("pytest", args, env=_env(project, env), cwd=str(project), server=None if fresh else _server)


# In the fake adapters: a member of a capability group that raises NotSupported.
_REFUSE = (
    "def _refuse(why):\n"
    "    def member(*args, **kwargs):\n"
    "        raise NotSupported(why)\n"
    "    return member\n"
)


def _adapter(project: Path, body: str) -> None:
    """``fakeimpl:make``: the reference's adapter named ``fake``, with ``body`` as extra methods."""
    head = (
        "from conformance import NotSupported\n"
        "from conformance.adapters.reference import ReferenceImplementation\n\n\n"
        f"{_REFUSE}\n\n"
        "class Fake(ReferenceImplementation):\n"
        "    name = 'fake'\n\n"
        "    def snapshot_root(self):\n        return None\n\n"
        "    def expectations_file(self):\n        return None\n"
    )
    tail = "\n\ndef make():\n    return Fake()\n"
    (project / "fakeimpl.py").write_text(head + textwrap.indent(textwrap.dedent(body), "    ") + tail)


def test_the_plugin_is_inert_in_a_project_that_does_not_run_the_suite(tmp_path):
    (tmp_path / "test_plain.py").write_text(textwrap.dedent("""\
        import os, sys
        import pytest

        @pytest.mark.contract("markers are registered by the plugin")
        def test_untouched(request):
            import hypothesis
            assert "torch" not in sys.modules
            assert not [k for k in os.environ if k.startswith("TORCH_NEURONX_")]
            assert not str(hypothesis.settings._current_profile).startswith("conformance")
            assert "impl" not in request.fixturenames and not request.node.user_properties
        """))
    proc = _run(tmp_path, "--strict-markers", "test_plain.py", fresh=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (tmp_path / "reports").exists()


def test_a_bad_implementation_is_a_usage_error(tmp_path):
    proc = _run(tmp_path, "--conformance-impl", "no_such_module:make", "--pyargs", "conformance.tests.test_eager_parity")
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    assert "no_such_module" in proc.stderr and "package.module:factory" not in proc.stderr
    assert "INTERNALERROR" not in proc.stdout + proc.stderr
    proc = _run(tmp_path, "--conformance-impl", "no-colon", "--pyargs", "conformance.tests.test_eager_parity")
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR and "package.module:factory" in proc.stderr


def test_not_supported_skips_in_a_test_a_module_fixture_and_a_child_and_reports_go_per_lane(tmp_path):
    _adapter(tmp_path, """
        def lower(self, model, args):
            raise NotSupported("fake lowers nothing")

        def backend(self):  # adapter v2: a group's member is changed on the group's object
            group = super().backend()
            group.torch_compile = _refuse("fake compiles nothing")
            return group
        """)
    args = [
        "--conformance-impl", "fakeimpl:make", "--pyargs",
        "conformance.tests.test_hlo_determinism",  # a module fixture whose children raise NotSupported
        "conformance.tests.test_backend_contract",  # pytest.raises(Exception) around a NotSupported
        "-k", "determinism or deterministic or options_must_be",
    ]
    proc = _run(tmp_path, *args)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    summary = json.loads((tmp_path / "reports/fake/default/summary.json").read_text())
    outcomes = {t["id"]: (t["outcome"], t["message"]) for t in summary["tests"]}
    assert summary["schema_version"] >= 2 and summary["invocation"]["args"][-1] == "determinism or deterministic or options_must_be"
    assert outcomes["test_backend_contract.py::test_options_must_be_a_dict_or_none"] == (
        "skipped", "not supported by fake: fake compiles nothing")
    determinism = {k: v for k, v in outcomes.items() if k.startswith("test_hlo_determinism.py")}
    # the tests on the module fixture skip with the reason its children gave; the in-process ones with the adapter's
    from_children = {k: v for k, v in determinism.items() if "fresh_process" in k}
    assert len(from_children) >= 3 and all(o == "skipped" and m == "not supported by fake: lowering child: fake lowers nothing"
                                           for o, m in from_children.values()), from_children
    assert all(v == ("skipped", "not supported by fake: fake lowers nothing") for k, v in determinism.items()
               if k not in from_children), determinism
    assert summary["totals"]["error"] == 0 and summary["totals"]["passed"] == 0
    junit = (tmp_path / "reports/fake/default/junit.xml").read_text()
    assert 'name="conformance-fake-default"' in junit and "<skipped" in junit

    before = (tmp_path / "reports/fake/default/summary.json").read_text()
    lane = [*args[:3], "conformance.tests.test_backend_contract", "-k", "options_must_be", "--conformance-lane", "strict"]
    proc = _run(tmp_path, *lane)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads((tmp_path / "reports/fake/strict/summary.json").read_text())["lane"] == "strict"
    assert (tmp_path / "reports/fake/default/summary.json").read_text() == before


def test_expectations_mark_known_failures_fail_unexpected_passes_and_report_stale_entries(tmp_path):
    _adapter(tmp_path, """
        def compiler_args(self):
            group = super().compiler_args()
            group.with_optimization_level = lambda args, level: list(args)  # broken on purpose: the level is never applied
            return group
        """)
    module = "test_compiler_args_scope.py"
    (tmp_path / "expected.txt").write_text(
        f"# comment\n{module}::test_level_helper_keeps_unrelated_items_verbatim  # the fake ignores the level\n"
        f"{module}::test_none_scope_is_no_override  # listed, yet it passes\n"
        f"{module}::test_no_such_test  # stale\n"
    )
    args = ["--conformance-impl", "fakeimpl:make", "--conformance-expectations", "expected.txt",
            "--pyargs", "conformance.tests.test_compiler_args_scope", "-k", "verbatim or none_scope"]
    proc = _run(tmp_path, *args)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    tests = {t["id"].split("::", 1)[1]: t for t in json.loads((tmp_path / "reports/fake/default/summary.json").read_text())["tests"]}
    assert tests["test_level_helper_keeps_unrelated_items_verbatim"]["outcome"] == "xfailed"
    assert tests["test_none_scope_is_no_override"]["outcome"] == "failed"
    assert "XPASS(strict)" in tests["test_none_scope_is_no_override"]["message"]
    assert f"WARNING conformance: stale expectation '{module}::test_no_such_test'" in out

    (tmp_path / "expected.txt").write_text(
        f"{module}::test_level_helper_keeps_unrelated_items_verbatim  # the fake ignores the level\n"
        f"{module}::test_no_such_test  # stale\n"
    )
    proc = _run(tmp_path, *args, "--conformance-strict")
    assert proc.returncode == 1 and "ERROR conformance: stale expectation" in proc.stdout, proc.stdout



def test_snapshot_trees_of_two_implementations_coexist(tmp_path):
    _adapter(tmp_path, """
        def fx_passes(self):
            group = super().fx_passes()
            group.identity = group.passes_applied = group.graph_after_passes = _refuse("fake")
            return group

        def compile(self, *args, **kwargs):
            raise NotSupported("fake")
        """)
    other = tmp_path / "snaps/other/test_fx_passes"
    other.mkdir(parents=True)
    (other / "test_default_order.json").write_text('{"order":["not","ours"]}\n')
    (other / "test_removed_long_ago.json").write_text("{}\n")
    args = ["--conformance-impl", "fakeimpl:make", "--pyargs", "conformance.tests.test_fx_passes"]
    env = {"CONFORMANCE_SNAPSHOT_DIR": str(tmp_path / "snaps")}

    proc = _run(tmp_path, *args, "--snapshot-update", env=env)
    assert proc.returncode == 0 and "1 snapshot generated" in proc.stdout, proc.stdout + proc.stderr
    ours = tmp_path / "snaps/fake/test_fx_passes/test_default_order.json"
    assert json.loads(ours.read_text())["order"][0] == "DeviceRewriterPass"
    assert sorted(p.name for p in other.iterdir()) == ["test_default_order.json", "test_removed_long_ago.json"]

    (ours.parent / "test_gone.json").write_text("{}\n")
    proc = _run(tmp_path, *args, env=env)  # only our own stray file is unused; the other tree is not ours
    assert "1 snapshot passed. 1 snapshot unused" in proc.stdout and "removed_long_ago" not in proc.stdout, proc.stdout


def test_the_adapter_page_lists_every_capability_group():
    text = (REPO / "docs/adapter.md").read_text()
    rows = {line.split("|")[1].strip().strip("`"): line for line in text.splitlines() if line.startswith("| `")}
    for cap in CAPABILITIES.values():
        assert cap.name in rows, f"docs/adapter.md has no row for capability {cap.name!r}"
        assert f"`{cap.kind.__name__}`" in rows[cap.name], f"docs/adapter.md: {cap.name} row lacks its type"
        for member in (*cap.required, *cap.optional):
            assert f"`{member}`" in rows[cap.name], f"docs/adapter.md: {cap.name} row lacks {member}"


def test_the_atom_tests_use_only_the_members_of_the_atom_capability():
    # The ATOM contract is what AtomCapability declares: no test or fixture reaches past it.
    import ast

    from conformance.harness.capabilities import AtomCapability, members

    declared = set(members(AtomCapability)) | {"missing"}
    used: dict[str, set[str]] = {}
    for path in sorted((REPO / "conformance").rglob("*atom*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "atom":
                used.setdefault(node.attr, set()).add(path.name)
    assert len(used) >= 20, sorted(used)  # the scan sees the tests
    beyond = {name: files for name, files in used.items() if name not in declared}
    assert not beyond, f"ATOM tests use names AtomCapability does not declare: {beyond}"


def test_a_capability_is_declared_by_its_accessor_and_typed():
    from conformance.adapters.torch_builtin import aot_eager
    from conformance.harness.implementation import missing_capabilities

    impl = aot_eager()
    absent = missing_capabilities(impl, list(CAPABILITIES))
    assert sorted(absent) == ["atom", "cache", "capture", "compiler_args", "fx_passes", "spmd"], absent
    assert absent["cache"] == "a compile cache (cache() not provided)"
    impl.cache = lambda: {"env": {}}  # an untyped answer is the adapter's bug, named as such
    with pytest.raises(TypeError, match=r"cache\(\) returned dict, not a conformance.harness.capabilities.CacheCapability"):
        missing_capabilities(impl, ["cache"])
    with pytest.raises(ValueError, match="unknown capability group 'caches'"):
        missing_capabilities(impl, ["caches"])


def _builtin_adapter(project: Path, body: str, name: str = "quiet") -> None:
    """``fakeimpl:make``: torch's ``aot_eager`` adapter named ``name`` (cheap: no compiler of
    ours), with ``body`` as extra methods."""
    head = (
        "import contextlib\n"
        "from conformance import NotSupported\n"
        "from conformance.adapters.torch_builtin import TorchBuiltinImplementation\n\n\n"
        f"{_REFUSE}\n\n"
        "class Fake(TorchBuiltinImplementation):\n"
        f"    def __init__(self):\n        super().__init__('aot_eager')\n        self.name = {name!r}\n\n"
        "    def expectations_file(self):\n        return None\n"
    )
    tail = "\n\ndef make():\n    return Fake()\n"
    (project / "fakeimpl.py").write_text(head + textwrap.indent(textwrap.dedent(body), "    ") + tail)


def _summary(project: Path, name: str) -> dict:
    return json.loads((project / f"reports/{name}/default/summary.json").read_text())


def test_a_silent_fallback_is_its_own_outcome_never_a_pass(tmp_path):
    # The adapter hands back the model itself: parity with eager holds, yet nothing was compiled.
    _builtin_adapter(tmp_path, """
        def compile(self, model, **kwargs):
            return model
        """)
    proc = _run(tmp_path, "--conformance-impl", "fakeimpl:make", "--pyargs", "conformance.tests.test_eager_parity",
                "-k", "second_call or float32")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    summary = _summary(tmp_path, "quiet")
    outcomes = {t["id"].split("::", 1)[1]: t for t in summary["tests"]}
    assert summary["totals"]["fell back"] == 2 and summary["totals"]["passed"] == 0, summary["totals"]
    test = outcomes["test_second_call_reuses_the_compiled_graph_and_stays_correct"]
    assert test["outcome"] == "fell back"
    assert test["message"] == "fell back: no graph reached the implementation's backend"
    assert test["evidence"]["graphs"] == 0 and test["evidence"]["backend_runs"] == 0
    page = (tmp_path / "reports/quiet/default/summary.md").read_text()
    first_screen = page[: page.index("## Totals per contract")]
    assert "## Failures and fallbacks (2)" in first_screen and "### eager_parity (2)" in first_screen
    assert "- **fell back** `test_float_dtypes_match_eager[float32]`: no graph reached" in first_screen
    junit = (tmp_path / "reports/quiet/default/junit.xml").read_text()
    assert 'failures="2"' in junit


def test_a_reported_fallback_fails_the_test_and_a_support_row_never_reads_supported(tmp_path):
    # The implementation compiles for real, and reports (its evidence) that one graph ran eagerly.
    _builtin_adapter(tmp_path, """
        @contextlib.contextmanager
        def evidence(self):
            with super().evidence() as ev:
                ev.fallbacks.append({"graph": "g0", "reason": "float16 has no kernel, ran eagerly"})
                yield ev
        """, name="reporting")
    proc = _run(tmp_path, "--conformance-impl", "fakeimpl:make", "--pyargs", "conformance.tests.test_eager_parity",
                "conformance.tests.test_backend_support", "-k", "float32 or test_model or test_disable")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary = _summary(tmp_path, "reporting")
    tests = {t["id"].split("::", 1)[1]: t for t in summary["tests"]}
    assert tests["test_float_dtypes_match_eager[float32]"]["message"] == "fell back: g0: float16 has no kernel, ran eagerly"
    assert tests["test_float_dtypes_match_eager[float32]"]["evidence"]["graphs"] == 1
    rows = {(r["table"], r["row"]): r for r in summary["support"]}
    model = rows[("parameters", "model")]
    assert model["status"] == "Fell back" and model["declared"] == "Supported", model
    assert model["notes"].startswith("fell back: g0: float16 has no kernel") and model["evidence"]["graphs"] >= 2
    assert tests["test_model"]["outcome"] == "fell back"
    support_md = (tmp_path / "reports/reporting/default/support.md").read_text()
    assert "| `model` | Fell back | 2 compiled / 2 run, 1 fell back |" in support_md, support_md


def test_honest_answers_skip_with_the_reason(tmp_path):
    # Empty answers: no variables, no forced breaks, no debug artifacts, no declared matrix.
    _builtin_adapter(tmp_path, """
        def backend(self):
            group = super().backend()
            group.forced_graph_breaks = group.environment_variables = lambda: {}
            group.debug_artifact_globs = group.expected_support = lambda: {}
            return group
        """, name="empty")
    proc = _run(tmp_path, "--conformance-impl", "fakeimpl:make", "--pyargs", "conformance.tests.test_backend_support",
                "-k", "sort_breaks or var_debug_dir or var_fallback or no_lowering")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = _summary(tmp_path, "empty")
    messages = {t["id"].split("::", 1)[1]: (t["outcome"], t["message"]) for t in summary["tests"]}
    assert messages["test_sort_breaks"] == (
        "skipped", "not supported by empty: empty forces no such graph break (forced_graph_breaks() has no 'sort')")
    assert messages["test_var_fallback"] == (
        "skipped", "not supported by empty: empty does not read TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION "
                   "(not in environment_variables())")
    assert summary["totals"]["failed"] == summary["totals"]["error"] == 0
    page = (tmp_path / "reports/empty/default/summary.md").read_text()
    assert "## Skips by reason (4)" in page and "| 1 | not supported by empty: empty does not read" in page


def test_a_shared_fixture_that_fails_is_reported_once_and_its_dependents_skip_naming_it(tmp_path):
    # The module fixture lowering the cache-key tests' graphs breaks; one test reports it.
    _adapter(tmp_path, """
        def lower(self, model, args):
            raise RuntimeError("the lowering crashed on purpose")
        """)
    proc = _run(tmp_path, "--conformance-impl", "fakeimpl:make", "--pyargs", "conformance.tests.test_cache_key",
                "-k", "repeatable or whitespace or source_locations")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary = _summary(tmp_path, "fake")
    bad = [t for t in summary["tests"] if t["outcome"] in ("error", "failed")]
    assert len(bad) == 1 and "the lowering crashed on purpose" in bad[0]["message"], bad
    skipped = [t for t in summary["tests"] if t["outcome"] == "skipped"]
    assert len(skipped) >= 2, summary["tests"]
    first = bad[0]["id"]
    assert all(t["message"] == f"not run: the shared fixture 'hlos' failed in {first} (reported there): "
                               "RuntimeError: the lowering crashed on purpose" for t in skipped), skipped


def test_a_declared_precision_that_is_not_a_torch_dtype_is_a_collection_error_naming_the_method(tmp_path):
    (tmp_path / "fakeprecision.py").write_text(textwrap.dedent("""\
        from conformance import Implementation
        from conformance.harness.precision import Precision

        class Fake(Implementation):
            name = "fake"

            def precision(self):
                return Precision(computes={"float64": "fp32"})

        def make():
            return Fake()
        """))
    proc = _run(tmp_path, "--conformance-impl", "fakeprecision:make", "--collect-only", "--pyargs", "conformance.tests.test_numerics")
    out = proc.stdout + proc.stderr
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    assert "ERROR collecting" in out and "test_numerics" in out, out
    assert "fakeprecision.Fake.precision()" in out and "'fp32' is not the name of a torch float dtype" in out, out
