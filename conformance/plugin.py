"""The pytest plugin (``pytest11`` entry point ``conformance``).

- ``--impl package.module:factory`` (or ``CONFORMANCE_IMPL``) chooses the implementation under test;
  the default is this project's reference.
- The report header prints the implementation, its tool versions and every ``CONFORMANCE_*``,
  ``NEURON_*`` and ``TORCH_NEURONX_*`` variable that is set.
- ``NotSupported`` raised by an adapter turns into a skip that carries the reason.
- At the end of a run that executed conformance tests, ``reports/<impl>/summary.json`` and
  ``summary.md`` are written (by the controller only, under ``pytest -n``).
- Unless the caller set them, the cache variables point into a fresh temporary directory per
  process, so a run never reads or pollutes a cache it was not given.
"""

from __future__ import annotations

import datetime
import json
import os
import tempfile
from pathlib import Path

import pytest

from conformance import models_report, snapshots, support as _support
from conformance.support import support  # noqa: F401  (fixture for the support probes, issue 4)
from conformance.implementation import DEFAULT_IMPL, Implementation, NotSupported, load_implementation

_ENV_PREFIXES = ("CONFORMANCE_", "NEURON_", "TORCH_NEURONX_")
_CACHE_VARS = {
    "TORCH_NEURONX_NEFF_CACHE_DIR": "neff_cache",
    "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR": "local_cache",
    "TORCH_NEURONX_HLO_CACHE_DIR": "hlo_cache",
    "TORCH_NEURONX_DEBUG_DIR": "debug",
}
_IMPL_KEY = pytest.StashKey[Implementation]()
_RESULTS_KEY = pytest.StashKey[dict]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance")
    group.addoption(
        "--impl",
        default=None,
        help="implementation under test, as package.module:factory (default: CONFORMANCE_IMPL or the reference)",
    )
    group.addoption(
        "--report-dir",
        default=None,
        help="where reports/<impl>/ is written (default: CONFORMANCE_REPORT_DIR or <rootdir>/reports)",
    )


def _set_env() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(_ENV_PREFIXES)}


def _hypothesis_profiles() -> None:
    """``ci`` (derandomized, no deadline) under CI=true; ``dev`` otherwise.

    Override with ``HYPOTHESIS_PROFILE``. Compiling is slow, so property tests that compile keep
    their own small ``max_examples``.
    """
    try:
        from hypothesis import HealthCheck, settings
    except ImportError:  # hypothesis is a test extra
        return
    common = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    settings.register_profile("ci", derandomize=True, print_blob=True, **common)
    settings.register_profile("dev", **common)
    default = "ci" if os.environ.get("CI", "").lower() in ("1", "true", "yes") else "dev"
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", default))


def pytest_configure(config: pytest.Config) -> None:
    _hypothesis_profiles()
    config.addinivalue_line("markers", "contract(name): the contract of the backend reference a test checks")
    config.addinivalue_line("markers", "support(table, item): the support-matrix row a probe fills (conformance/support.py)")
    spec = config.getoption("--impl") or os.environ.get("CONFORMANCE_IMPL")
    impl = load_implementation(spec)
    config.stash[_IMPL_KEY] = impl
    config.stash[_RESULTS_KEY] = {"spec": spec or DEFAULT_IMPL}
    snapshots.set_implementation(impl.name)
    scratch = None
    for var, sub in _CACHE_VARS.items():
        if var not in os.environ:
            scratch = scratch or tempfile.mkdtemp(prefix="conformance-")
            os.environ[var] = os.path.join(scratch, sub)


def pytest_report_header(config: pytest.Config) -> list[str]:
    impl = config.stash.get(_IMPL_KEY, None)
    if impl is None:
        return []
    lines = [f"conformance: implementation {impl.name!r} ({config.stash[_RESULTS_KEY]['spec']})"]
    versions = impl.versions()
    if versions:
        lines.append("conformance: versions " + ", ".join(f"{k}={v}" for k, v in versions.items()))
    env = {k: v for k, v in _set_env().items()}
    lines.append("conformance: environment " + (", ".join(f"{k}={v}" for k, v in env.items()) or "(none set)"))
    return lines


@pytest.fixture(scope="session")
def impl(pytestconfig: pytest.Config) -> Implementation:
    """The implementation under test."""
    return pytestconfig.stash[_IMPL_KEY]


@pytest.fixture(autouse=True)
def _fresh_dynamo(request: pytest.FixtureRequest):
    """Each test starts from a Dynamo with no compiled frames."""
    impl = request.config.stash.get(_IMPL_KEY, None)
    if impl is not None:
        impl.reset()
    yield


def _skip_reason(impl_name: str, exc: NotSupported) -> str:
    return f"not supported by {impl_name}: {exc}"


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function):
    try:
        return (yield)
    except NotSupported as exc:
        pytest.skip(_skip_reason(pyfuncitem.config.stash[_IMPL_KEY].name, exc))


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    try:
        return (yield)
    except NotSupported as exc:
        pytest.skip(_skip_reason(request.config.stash[_IMPL_KEY].name, exc))


def _is_conformance(nodeid: str) -> bool:
    path = nodeid.split("::", 1)[0]
    return Path(path).parent.name == "conformance" and Path(path).name.startswith("test_")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _support.setup_item(item)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not _is_conformance(report.nodeid):
        return
    _SUPPORT.add(report)
    _MODELS.add(report)
    entry = _RESULTS.setdefault(report.nodeid, {"outcome": "passed", "duration": 0.0, "reason": ""})
    entry["duration"] = round(entry["duration"] + report.duration, 3)
    if report.skipped:
        entry["outcome"] = "skipped"
        if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
            entry["reason"] = str(report.longrepr[2]).removeprefix("Skipped: ")
    elif report.failed:
        entry["outcome"] = "failed" if report.when == "call" else "error"
        text = (report.longreprtext or "").strip().splitlines()
        entry["reason"] = text[-1][:300] if text else ""


# Outcomes by test id, filled on the controller (xdist forwards every worker's reports to it).
_RESULTS: dict[str, dict] = {}
_SUPPORT = _support.Collected()
_MODELS = models_report.Collected()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if hasattr(config, "workerinput"):
        return  # under xdist only the controller writes
    tests = _RESULTS
    if not tests:
        return
    impl = config.stash[_IMPL_KEY]
    report_dir = Path(
        config.getoption("--report-dir") or os.environ.get("CONFORMANCE_REPORT_DIR") or (config.rootpath / "reports")
    )
    out = report_dir / impl.name
    out.mkdir(parents=True, exist_ok=True)
    summary = _summarize(impl, config, tests)
    _atomic_write(out / "summary.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    _atomic_write(out / "summary.md", render_markdown(summary))
    if _SUPPORT.observations:
        _atomic_write(out / "support.md", _support.render(impl.name, summary["versions"], _SUPPORT.observations, _SUPPORT.order()))
    if _MODELS.rows:
        _atomic_write(out / "models.md", models_report.render(impl.name, summary["versions"], _MODELS.rows))


def _summarize(impl: Implementation, config: pytest.Config, tests: dict) -> dict:
    totals: dict[str, int] = {"passed": 0, "failed": 0, "skipped": 0, "error": 0}
    contracts: dict[str, dict[str, int]] = {}
    for nodeid, entry in tests.items():
        totals[entry["outcome"]] = totals.get(entry["outcome"], 0) + 1
        module = Path(nodeid.split("::", 1)[0]).stem.removeprefix("test_")
        c = contracts.setdefault(module, {"passed": 0, "failed": 0, "skipped": 0, "error": 0})
        c[entry["outcome"]] = c.get(entry["outcome"], 0) + 1
    return {
        "implementation": impl.name,
        "spec": config.stash[_RESULTS_KEY]["spec"],
        "versions": impl.versions(),
        "environment": _set_env(),
        "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "totals": totals,
        "contracts": dict(sorted(contracts.items())),
        "tests": [{"nodeid": k, **v} for k, v in sorted(tests.items())],
    }


def render_markdown(summary: dict) -> str:
    t = summary["totals"]
    lines = [
        f"# Conformance: {summary['implementation']}",
        "",
        f"Implementation `{summary['spec']}`, finished {summary['finished']}.",
        "",
        "Versions: " + (", ".join(f"{k} `{v}`" for k, v in summary["versions"].items()) or "(none reported)"),
        "",
        f"**{t['passed']} passed, {t['failed']} failed, {t['error']} errors, {t['skipped']} skipped**",
        "",
        "| contract | passed | failed | errors | skipped |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, c in summary["contracts"].items():
        lines.append(f"| {name} | {c['passed']} | {c['failed']} | {c['error']} | {c['skipped']} |")
    problems = [x for x in summary["tests"] if x["outcome"] != "passed"]
    if problems:
        lines += ["", "## Not passed", "", "| test | outcome | reason |", "|---|---|---|"]
        for x in problems:
            reason = x["reason"].replace("|", "\\|").replace("\n", " ")
            lines.append(f"| `{x['nodeid']}` | {x['outcome']} | {reason} |")
    return "\n".join(lines) + "\n"


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
