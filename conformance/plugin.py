"""The pytest plugin (``pytest11`` entry point ``conformance``).

Installed, it is active in every pytest run of the environment, so outside the suite it does
nothing: it registers its options (all ``--conformance-*``), markers and Hypothesis profiles, and
imports neither torch nor the implementation. Fixtures live in ``conformance/tests/conftest.py`` and apply
to the suite's own tests only.

- ``--conformance-impl package.module:factory`` (or ``CONFORMANCE_IMPL``) chooses the
  implementation; the default is this project's reference. A spec that does not load is a usage
  error. An explicit spec is loaded at start-up, the default when the first conformance test needs it.
- :class:`~conformance.harness.implementation.NotSupported` is a skip carrying the reason wherever it is
  raised: a test, a fixture of any scope, a child process (see :mod:`conformance.harness.child`).
- A test module whose capability group the adapter does not provide is skipped with the reason
  (:data:`~conformance.harness.implementation.CAPABILITIES`).
- The implementation's expectation file marks known failures (each with a reason): such a test
  that fails is an expected failure, one that passes fails the run, an entry that matches no test
  of the modules that ran is stale (a warning; an error with ``--conformance-strict``).
- After a run with conformance tests the controller writes ``<report dir>/<impl>/<lane>/``:
  ``summary.json``, ``summary.md``, ``junit.xml``, ``support.md`` and ``compile-times.svg``
  (:mod:`conformance.reporting.report`). The report dir is ``--conformance-report-dir``,
  ``CONFORMANCE_REPORT_DIR``, or ``reports/`` in the directory pytest was started from; the lane is
  ``--conformance-lane`` (``default``), so the strict lane keeps its own report.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import conformance
from conformance.harness import expectations as _expectations
from conformance.reporting import models_report, spec_coverage as _spec, support as _support
from conformance.harness import env, pytest_internals
from conformance.harness.evidence import observe as observe_work
from conformance.harness.outcomes import EVIDENCE, EVIDENCE_PROPERTY, FELL_BACK, FELL_BACK_PROPERTY, FellBack, fell_back
from conformance.harness.implementation import (
    CAPABILITIES,
    DEFAULT_IMPL,
    Implementation,
    NotSupported,
    load_implementation,
    missing_capabilities,
)

_ENV_PREFIXES = ("CONFORMANCE_", "NEURON_", "TORCH_NEURONX_")
_PACKAGE_DIR = Path(conformance.__file__).resolve().parent
ITEM_PROPERTY = "conformance_item"
TIMES_PROPERTY = "conformance_compile_times"
#: the seed statements a test cites (its ``spec`` markers), as JSON
SPEC_PROPERTY = "conformance_spec"
HYPOTHESIS_PROFILES = ("conformance-ci", "conformance-dev")
#: the test whose setup or call is running (so a fixture's failure can name the test that needed it)
RUNNING = pytest.StashKey[pytest.Item]()


class Suite:
    """The session's view of the implementation under test (``config.stash[SUITE]``)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        option = config.getoption("conformance_impl")
        self.spec = option or env.impl_spec() or DEFAULT_IMPL
        self.explicit = bool(option or env.impl_spec())
        self.lane = config.getoption("conformance_lane") or env.lane() or "default"
        self.strict = bool(config.getoption("conformance_strict"))
        self._impl: Implementation | None = None
        self.expected: _expectations.Expectations | None = None
        self._catalogue: dict | None = None
        self.started = time.time()

    def impl(self) -> Implementation:
        if self._impl is None:
            try:
                self._impl = load_implementation(self.spec)
            except ValueError as exc:
                raise pytest.UsageError(f"--conformance-impl / CONFORMANCE_IMPL: {exc}") from exc
        return self._impl

    def expectations(self) -> _expectations.Expectations:
        if self.expected is None:
            path = self.config.getoption("conformance_expectations") or env.expectations_file()
            path = path or self.impl().expectations_file()
            self.expected = _expectations.load(path) if path else _expectations.Expectations.empty()
        return self.expected

    def catalogue(self) -> dict:
        """The seeds' statements (conformance/spec/), read once, when a test first cites one."""
        if self._catalogue is None:
            self._catalogue = _spec.load()
        return self._catalogue

    def report_dir(self) -> Path:
        base = self.config.getoption("conformance_report_dir") or env.report_dir()
        root = Path(base) if base else Path(self.config.invocation_params.dir) / "reports"
        return root / self.impl().name / self.lane


SUITE = pytest.StashKey[Suite]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "conformance suite for Neuron-style torch.compile backends")
    group.addoption("--conformance-impl", dest="conformance_impl", default=None,
                    help="implementation under test, package.module:factory (default: CONFORMANCE_IMPL or the reference)")
    group.addoption("--conformance-report-dir", dest="conformance_report_dir", default=None,
                    help="where <impl>/<lane>/ reports go (default: CONFORMANCE_REPORT_DIR or ./reports)")
    group.addoption("--conformance-lane", dest="conformance_lane", default=None,
                    help="name of this run's lane, a report subdirectory (default: CONFORMANCE_LANE or 'default')")
    group.addoption("--conformance-snapshot-dir", dest="conformance_snapshot_dir", default=None,
                    help="root of the per-implementation snapshot trees (default: CONFORMANCE_SNAPSHOT_DIR, "
                         "the adapter's snapshot_root(), or ./conformance-snapshots)")
    group.addoption("--conformance-expectations", dest="conformance_expectations", default=None,
                    help="expectation file of known failures (default: CONFORMANCE_EXPECTATIONS or the adapter's)")
    group.addoption("--conformance-strict", dest="conformance_strict", action="store_true", default=False,
                    help="a stale expectation entry is an error, not a warning")


def _register_hypothesis_profiles() -> None:
    """``conformance-ci`` and ``conformance-dev``: Hypothesis's own ``ci`` and ``default`` profiles
    without a deadline (a compile takes seconds) and without the function-scoped-fixture check
    (the suite's per-test reset is function-scoped and holds across examples). Registering loads
    nothing: conformance tests use them through :func:`conformance.harness.properties.settings`; other
    tests keep whatever is loaded."""
    try:
        from hypothesis import HealthCheck, settings
    except ImportError:  # hypothesis is a test extra
        return
    for name, parent in zip(HYPOTHESIS_PROFILES, ("ci", "default")):
        base = settings.get_profile(parent)
        settings.register_profile(name, parent=base, deadline=None,
                                  suppress_health_check=[
            *base.suppress_health_check, HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
        ])


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "contract(name): the contract of the backend reference a test checks")
    config.addinivalue_line("markers", "support(table, item): the support-matrix row a probe fills (conformance/reporting/support.py)")
    config.addinivalue_line("markers", "capability(*groups): capability groups of the adapter a test needs "
                                       "(conformance.harness.implementation.CAPABILITIES); skipped without them")
    config.addinivalue_line("markers", "evidence: the test passes only when the implementation's compiled path "
                                       "carried its work (conformance/harness/evidence.py); otherwise 'fell back: <reason>'")
    # the suite's own modules use these; registered here so a run under --pyargs from another
    # project (without this repository's pyproject) knows them too
    config.addinivalue_line("markers", "slow: a test that compiles many graphs or starts several processes")
    config.addinivalue_line("markers", "cuda: needs a CUDA device; skipped with its reason elsewhere")
    config.addinivalue_line("markers", "spec(*ids): the seed statements a test checks (conformance/spec/, "
                                       "conformance/reporting/spec_coverage.py); they make spec-coverage.md")
    _register_hypothesis_profiles()
    suite = Suite(config)
    config.stash[SUITE] = suite
    config.pluginmanager.register(Results(suite), "conformance-results")
    if suite.explicit:
        suite.impl()  # a bad spec is a usage error at once, on the controller too


def pytest_report_header(config: pytest.Config) -> list[str]:
    suite = config.stash.get(SUITE, None)
    if suite is None or not suite.explicit:
        return []
    impl = suite.impl()
    lines = [f"conformance: implementation {impl.name!r} ({suite.spec}), lane {suite.lane!r}"]
    versions = impl.versions()
    if versions:
        lines.append("conformance: versions " + ", ".join(f"{k}={v}" for k, v in versions.items()))
    env = _set_env()
    lines.append("conformance: environment " + (", ".join(f"{k}={v}" for k, v in env.items()) or "(none set)"))
    return lines


def _set_env() -> dict[str, str]:
    return env.with_prefixes(_ENV_PREFIXES)


def is_conformance_item(item: pytest.Item) -> bool:
    """A test of this package (however it was collected: a path, ``--pyargs``, an installed copy)."""
    try:
        return item.path.resolve().is_relative_to(_PACKAGE_DIR) and item.path.name.startswith("test_")
    except OSError:
        return False


def test_id(item: pytest.Item) -> str:
    """``test_module.py::test_name[param]``: the id reports and expectation files use. pytest's own
    node id depends on how the suite was collected (a path, ``--pyargs``, the rootdir)."""
    return f"{item.path.name}::{item.nodeid.split('::', 1)[1]}"


def _module(item: pytest.Item) -> str:
    return item.path.stem.removeprefix("test_")


# --- collection: capability skips, expectations ----------------------------------------------------


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    ours = [item for item in items if is_conformance_item(item)]
    if not ours:
        return
    suite = config.stash[SUITE]
    impl = suite.impl()
    expected = suite.expectations()
    by_module = {m: c.name for c in CAPABILITIES.values() for m in c.modules}
    # each accessor is asked once per session: the groups an adapter declares do not change
    absent = missing_capabilities(impl, list(CAPABILITIES))
    for index, item in enumerate(ours):
        item.user_properties.append((ITEM_PROPERTY, test_id(item)))
        cited = [sid for marker in item.iter_markers("spec") for sid in marker.args]
        if cited:
            unknown = _spec.unknown_ids(cited, suite.catalogue())
            if unknown:
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.spec cites {unknown}, which conformance/spec/ "
                                        "does not list; add the statement there or correct the id")
            item.user_properties.append((SPEC_PROPERTY, json.dumps(sorted(set(cited)))))
        _support.setup_item(item, index)
        groups = [by_module[_module(item)]] if _module(item) in by_module else []
        for marker in item.iter_markers("capability"):
            groups.extend(marker.args)
        unknown = [g for g in groups if g not in CAPABILITIES]
        if unknown:
            raise pytest.UsageError(f"{item.nodeid}: unknown capability group(s) {unknown}; known: {sorted(CAPABILITIES)}")
        missing = {g: absent[g] for g in dict.fromkeys(groups) if g in absent}
        if missing:
            reason = "; ".join(f"{CAPABILITIES[g].contract} (capability {g!r}: {why})" for g, why in missing.items())
            item.add_marker(pytest.mark.skip(reason=f"not supported by {impl.name}: {reason}"))
            continue
        known = expected.reason_for(test_id(item))
        if known is not None:
            item.add_marker(pytest.mark.xfail(reason=f"known failure of {impl.name}: {known}", strict=True))


# --- NotSupported is a skip wherever it is raised ------------------------------------------------


def _skip_for(item: pytest.Item, exc: NotSupported):
    """The skip for ``exc`` raised in ``item``; a failure when the item is a support probe whose
    declared status says the row is available."""
    suite = item.config.stash[SUITE]
    reason = f"not supported by {suite.impl().name}: {exc}"
    marker = item.get_closest_marker("support")
    if marker is not None:
        declared = _support.declared_status(suite.impl(), *marker.args)
        if declared not in (None, _support.UNSUPPORTED):
            pytest.fail(f"support row {marker.args[0]}/{marker.args[1]!r}: declared {declared}, but the adapter "
                        f"raised NotSupported: {exc}", pytrace=False)
    try:
        pytest.skip(reason)
    except pytest.skip.Exception as skip:
        pytest_internals.at_item_location(skip)  # report the test's location, not this hook's
        raise


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    item.config.stash[RUNNING] = item
    try:
        return (yield)
    except NotSupported as exc:
        _skip_for(item, exc)
    except FellBack as exc:
        fell_back(item, str(exc))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    observe = is_conformance_item(item) and (
        item.get_closest_marker("evidence") is not None or item.get_closest_marker("support") is not None
    )
    item.config.stash[RUNNING] = item  # fixtures a test requests while it runs
    if not observe:
        try:
            return (yield)
        except NotSupported as exc:
            _skip_for(item, exc)
        except FellBack as exc:
            fell_back(item, str(exc))
    ev = None
    try:
        with observe_work(item.config.stash[SUITE].impl()) as ev:
            item.stash[EVIDENCE] = ev
            try:
                result = yield
            except NotSupported as exc:
                _skip_for(item, exc)
            except FellBack as exc:
                fell_back(item, str(exc))
    finally:
        if ev is not None:  # complete once the observation closed
            item.user_properties.append((EVIDENCE_PROPERTY, json.dumps(ev.refresh().as_dict())))
    if item.get_closest_marker("evidence") is not None:
        reason = ev.shortfall(require_compile=True)
        if reason is not None:
            fell_back(item, reason)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    """A fixture that raises NotSupported caches the skip, not the exception, so every test that
    shares a module- or session-scoped fixture skips with the reason instead of erroring.

    One cause, one report: a shared (not function-scoped) fixture of the suite that fails reports
    the failure once, in the first test that needed it; every later test that shares it is skipped
    naming the fixture, that test and the cause, instead of repeating the same error."""
    try:
        return (yield)
    except NotSupported as exc:
        try:
            pytest.skip(f"not supported by {request.config.stash[SUITE].impl().name}: {exc}")
        except pytest.skip.Exception as skip:
            pytest_internals.cache_skip(fixturedef, skip, request)
            raise
    except Exception as exc:
        item = request.config.stash.get(RUNNING, None)  # the test that needed the fixture first
        if fixturedef.scope != "function" and item is not None and is_conformance_item(item):
            _cache_one_cause(fixturedef, item, exc)
        raise


def _cache_one_cause(fixturedef, item: pytest.Item, exc: BaseException) -> None:
    """Make the tests after ``item`` that share ``fixturedef`` skip naming the cause (``item``
    still reports the exception itself)."""
    first = " ".join(str(exc).split())[:300]
    cause = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    try:
        pytest.skip(f"not run: the shared fixture {fixturedef.argname!r} failed in {test_id(item)} "
                    f"(reported there): {cause}")
    except pytest.skip.Exception as skip:
        pytest_internals.cache_skip(fixturedef, skip)


# --- results, gathered on the controller -----------------------------------------------------------


class Results:
    """The outcomes of one session's conformance tests, by test id (a plugin object registered at
    configure; under xdist the controller receives every worker's reports)."""

    def __init__(self, suite: Suite) -> None:
        self.suite = suite
        self.tests: dict[str, dict] = {}
        self.support = _support.Collected()
        self.models = models_report.Collected()
        self.times: list[dict] = []
        self.stale: list = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        props = dict(report.user_properties)
        if ITEM_PROPERTY not in props:
            return
        test = props[ITEM_PROPERTY]
        self.support.add(report)
        self.models.add(report)
        if report.when == "teardown" and TIMES_PROPERTY in props:
            self.times.extend({"test": test, "graph": g, "seconds": s} for g, s in json.loads(props[TIMES_PROPERTY]))
        entry = self.tests.setdefault(test, {"outcome": "passed", "duration": 0.0, "message": ""})
        if SPEC_PROPERTY in props:
            entry["spec"] = json.loads(props[SPEC_PROPERTY])
        entry["duration"] = round(entry["duration"] + report.duration, 3)
        if report.when == "call" and EVIDENCE_PROPERTY in props:
            entry["evidence"] = json.loads(props[EVIDENCE_PROPERTY])
        if report.when == "call" or report.failed or report.skipped:
            outcome, message = _outcome(report)
            if outcome in ("failed", "error") and FELL_BACK_PROPERTY in props:
                outcome, message = FELL_BACK, message.removeprefix("Failed: ")
            if entry["outcome"] in ("passed", "skipped") or outcome == "error":
                entry["outcome"], entry["message"] = outcome, message

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        # A suite module skipped at collection (``pytest.importorskip``: test_models.py without
        # transformers) or broken there has no test item and so no test report; pytest's closing
        # line counts it, so the summary records it too, under its file name, with the reason.
        if report.passed or hasattr(self.suite.config, "workerinput"):
            return
        path = Path(str(report.fspath))
        path = path if path.is_absolute() else Path(self.suite.config.rootpath) / path
        try:
            ours = path.resolve().is_relative_to(_PACKAGE_DIR) and path.name.startswith("test_") and path.suffix == ".py"
        except OSError:
            ours = False
        if not ours:
            return
        outcome, message = _outcome(report)
        self.tests[path.name] = {"outcome": outcome, "duration": round(getattr(report, "duration", 0.0) or 0.0, 3),
                                 "message": f"at collection: {message}", "collected": False}

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput") or not self.tests:
            return  # under xdist only the controller writes
        from conformance.reporting import report  # the report code loads only for a run of the suite

        # A module skipped at collection ran none of its tests: its expectations are not stale.
        ran = {k: v for k, v in self.tests.items() if v.get("collected", True)}
        self.stale = self.suite.expectations().stale(ran)
        if self.stale and self.suite.strict and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        report.write(
            self.suite.report_dir(),
            impl=self.suite.impl(),
            suite=self.suite,
            results=self.tests,
            support=self.support,
            compile_times=self.times,
            stale=[{"id": e.nodeid, "reason": e.reason} for e in self.stale],
            environment=_set_env(),
            models=self.models,
        )

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.tests or hasattr(self.suite.config, "workerinput"):
            return
        strict = self.suite.strict
        for e in self.stale:
            terminalreporter.write_line(
                f"{'ERROR' if strict else 'WARNING'} conformance: stale expectation {e.nodeid!r} ({e.reason}): "
                "no such test ran in its module", red=strict, yellow=not strict,
            )
        terminalreporter.write_line(f"conformance: reports in {self.suite.report_dir()}")


def _outcome(report: pytest.TestReport) -> tuple[str, str]:
    """(outcome, message) of one phase's report: the skip reason, the failure's message (not a
    file:line), or the reason a known failure is expected."""
    if hasattr(report, "wasxfail"):
        if report.skipped:
            crash = getattr(report.longrepr, "reprcrash", None)
            return "xfailed", report.wasxfail + (f"; it failed with: {crash.message[:2000]}" if crash else "")
        return "xpassed", report.wasxfail
    if report.skipped:
        reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3 else ""
        return "skipped", reason.removeprefix("Skipped: ")
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        message = crash.message if crash is not None else (report.longreprtext or "").strip()
        return ("failed" if report.when == "call" else "error"), message[:4000]
    return "passed", ""
